// skew: the command-line entry point. Parses the subcommand with CLI11, sets the log level, runs
// the subcommand's callback and turns any error into one message on stderr and exit code 1.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <system_error>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "dist/launch.h"
#include "kernels/cpu/process_env.h"
#include "tools/commands.h"
#include "tools/log_output.h"

namespace {

/// Under mpirun/srun: ranks other than 0 log warnings and errors only, each line naming the rank.
void set_rank_logging(const std::string& log_level) {
    const skew::LaunchInfo& info = skew::launch_info();
    spdlog::level::level_enum level = spdlog::level::from_str(log_level);
    if (info.world_size > 1 && info.rank != 0) level = std::max(level, spdlog::level::warn);
    spdlog::set_level(level);
}

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
    // OMP_WAIT_POLICY and OPENBLAS_CORETYPE are read when libgomp and OpenBLAS load, before main:
    // unless the user set them, run again once with them set (kernels/cpu/process_env.h). Under
    // mpirun or srun this happens before MPI_Init (the same process image, pid and environment),
    // so the launcher never sees it.
    skew::cpu::process_env_reexec(argv);
    try {
        skew::launch_init(&argc, &argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "skew: error: %s\n", e.what());
        return 1;
    }
    const int rc = run(argc, argv);
    skew::launch_finalize();
    return rc;
}

namespace {

int run(int argc, char** argv) {
    CLI::App app{"skew: train mixture-of-experts language models with tiered optimizer state"};
    app.require_subcommand(1);
    app.fallthrough();  // global flags (--log-level) may follow the subcommand
    std::string log_level = "info";
    app.add_option("--log-level", log_level, "Log level: trace, debug, info, warn, error, critical, off")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
    app.set_version_flag("--version", "skew 0.1.0");
    app.parse_complete_callback([&] { set_rank_logging(log_level); });
    set_rank_logging(log_level);
    skew::tools::log_to(stdout);

    skew::tools::register_plan_command(app);
    skew::tools::register_config_command(app);
    skew::tools::register_prepare_command(app);
    skew::tools::register_tokenize_command(app);
    skew::tools::register_train_command(app);
    skew::tools::register_report_command(app);
    skew::tools::register_eval_command(app);
    skew::tools::register_sample_command(app);
    skew::tools::register_export_command(app);
    skew::tools::register_import_command(app);

    // A first word that is no subcommand: CLI11 would only say that a subcommand is required.
    if (argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool known = false;
        for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
            names += (names.empty() ? "" : ", ") + sub->get_name();
            known = known || sub->get_name() == argv[1];
        }
        if (!known) {
            skew::launch_fail(fmt::format("unknown command '{}' (commands: {}; see skew --help)", argv[1], names), 2);
            return 2;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // Usage errors (bad flag, missing argument, value out of range): one line, exit 2.
        skew::launch_fail(fmt::format("{} (see skew --help)", e.what()), 2);
        return 2;
    } catch (const std::filesystem::filesystem_error& e) {
        // A file system failure no command anticipated (a symbolic link loop, a permission): one line
        // naming the path and the reason, never the library's raw "filesystem error: status: ...".
        const bool loop = e.code() == std::errc::too_many_symbolic_link_levels;
        skew::launch_fail(fmt::format("{}: {}{}", e.path1().empty() ? "(path)" : e.path1().string(), e.code().message(),
                                      loop ? " (a symbolic link loop: remove or fix the link)" : ""),
                          1);
        return 1;
    } catch (const std::exception& e) {
        // Any rank's error: one line naming the rank, then every rank ends (dist/launch.h).
        skew::launch_fail(e.what(), 1);
        return 1;
    }
    return 0;
}

}  // namespace
