// skew plan (being written).
#include "tools/commands.h"

namespace skew::tools {
void register_plan_command(CLI::App& app) { (void)app; }
}  // namespace skew::tools
