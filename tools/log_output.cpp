// The default logger's sink and pattern (log_output.h).
#include "tools/log_output.h"

#include <fmt/format.h>
#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "dist/launch.h"
#include "engine/process_env.h"

namespace skew::tools {

void log_to(std::FILE* stream, bool colour) {
    const spdlog::color_mode mode =
        colour && colour_output(fileno(stream)) ? spdlog::color_mode::always : spdlog::color_mode::never;
    spdlog::sink_ptr sink;
    if (stream == stderr) sink = std::make_shared<spdlog::sinks::ansicolor_stderr_sink_mt>(mode);
    else sink = std::make_shared<spdlog::sinks::ansicolor_stdout_sink_mt>(mode);
    const LaunchInfo& info = launch_info();
    auto logger = std::make_shared<spdlog::logger>("skew", sink);
    logger->set_level(spdlog::get_level());
    logger->set_pattern(info.world_size > 1 ? fmt::format("[%H:%M:%S] [%^%l%$] rank {}: %v", info.rank)
                                            : std::string("[%H:%M:%S] [%^%l%$] %v"));
    spdlog::set_default_logger(logger);
}

}  // namespace skew::tools
