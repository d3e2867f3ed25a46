// skew tokenize: placeholder until the data layer lands (issue 5).
#include "tools/commands.h"

namespace skew::tools {
void register_tokenize_command(CLI::App& app) { (void)app; }
}  // namespace skew::tools
