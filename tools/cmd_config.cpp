// skew config: validate a config and print it resolved (defaults + file + --set overrides), or
// print the reference of every key (the README's config reference is generated from it).
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
    cmd->add_flag("--reference", args->reference, "Print every key with type, default and meaning (Markdown)");
    cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set model.d_model=128 (repeatable)")->take_all();
    cmd->callback([args] {
        if (args->reference) {
            std::cout << config_reference_markdown();
            return;
        }
        if (args->config.empty()) throw CLI::RequiredError("config");
        Config cfg = load_config(args->config, args->overrides);
        std::cout << cfg.resolved_yaml << "\n";
    });
}

}  // namespace skew::tools
