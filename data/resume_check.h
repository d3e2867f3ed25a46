// Resume-time checks of a run's data (docs/data.md): what `skew train --resume` verifies before it
// continues a run on the shards of data.dir.
#pragma once
#include <string>

namespace skew::data {

/// --resume RUN_DIR: the data must be where and what it was. A relative data_dir that does not exist
/// is reported as relative to the current directory; when RUN_DIR holds a manifest.json, data_dir's
/// own must exist and describe the same shards (manifest_first_difference), and with at most 1 GiB
/// of shards each shard's MD5 must equal the one the run started with; a RUN_DIR with neither
/// manifest.json nor data_identity.json (kShardIdentityFile) is refused, as nothing would tell
/// other data from the run's. Throws skew::Error naming the folder, file or shard and what to do.
void check_resume_data(const std::string& data_dir, const std::string& run_dir);

}  // namespace skew::data
