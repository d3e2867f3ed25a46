// skew config: validate a config and print it resolved (defaults + file + --set overrides), or
// print the reference of every key (docs/config-reference.md's table is generated from it).
#include <fmt/format.h>

#include <iostream>

#include "engine/config.h"
#include "engine/config_schema.h"
#include "tools/commands.h"

namespace skew::tools {

void register_config_command(CLI::App& app) {
    struct Args {
        std::string config;
        bool reference = false;
        std::vector<std::string> overrides;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("config", "Validate a config and print it resolved, or print the key reference");
    cmd->add_option("config", args->config, "Experiment config (YAML)");
    cmd->add_flag("--reference", args->reference,
                  "Print every key with type, default and meaning (Markdown); takes no config");
    cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set model.d_model=128 (repeatable)")
        ->take_all();
    cmd->callback([args] {
        if (args->reference) {
            // the reference is every key's, of no one config: a file or --set given with it would be ignored
            if (!args->config.empty() || !args->overrides.empty())
                throw CLI::ValidationError("--reference",
                                           fmt::format("prints the key reference, which belongs to no config, so {} "
                                                       "would be ignored: drop it to print the "
                                                       "reference, or drop --reference to check and print the config",
                                                       args->config.empty() ? std::string("--set") : args->config));
            std::cout << config_reference_markdown();
            return;
        }
        if (args->config.empty()) throw CLI::RequiredError("config");
        Config cfg = load_config(args->config, args->overrides);
        std::cout << cfg.resolved_yaml << "\n";
    });
}

}  // namespace skew::tools
