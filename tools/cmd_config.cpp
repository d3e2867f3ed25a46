// skew config (being written).
#include "tools/commands.h"

namespace skew::tools {
void register_config_command(CLI::App& app) { (void)app; }
}  // namespace skew::tools
