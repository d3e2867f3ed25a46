// skew prepare: placeholder until the data layer lands (issue 5).
#include "tools/commands.h"

namespace skew::tools {
void register_prepare_command(CLI::App& app) { (void)app; }
}  // namespace skew::tools
