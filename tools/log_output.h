// Where `skew` writes its log lines: one spdlog logger on stdout or stderr, coloured only when
// that stream is a terminal (colour_output: never in a file or a pipe, never under an MPI
// launcher), the rank named on each line under mpirun/srun.
#pragma once
#include <cstdio>

namespace skew::tools {

/// Make the default spdlog logger write to `stream` (stdout or stderr) with the pattern
/// "[HH:MM:SS] [level] message" ("... rank R: message" in a multi-rank run), keeping the current
/// level. The level is coloured when `colour` and colour_output(fileno(stream)).
void log_to(std::FILE* stream, bool colour = true);

}  // namespace skew::tools
