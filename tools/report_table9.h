// `skew report`'s zero-shot table (paper Appendix D, Table 9) from a run's eval_<optimizer>.json.
#pragma once
#include <string>

namespace skew::tools {

/// Markdown for the zero-shot results in run_dir/eval_<optimizer>.json (written by `skew eval`):
/// PIQA and WinoGrande acc, HellaSwag and ARC acc_norm, each with its standard error, one row per
/// optimizer; "" when the run has no such file. A file that does not parse gets a row saying so.
std::string render_table9(const std::string& run_dir);

}  // namespace skew::tools
