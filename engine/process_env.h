// What the process's environment says about where it runs: whether an MPI launcher started it, and
// whether an output stream reaches a terminal, so that colour and "\r" redraws go to terminals
// only, never to a file or a pipe, on every rank (docs/training.md "Progress display").
#pragma once

namespace skew {

/// Whether the environment says an MPI launcher started this process with more than one rank or
/// under MPI at all: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), a PMIx or PMI launcher (PMIX_RANK,
/// PMI_SIZE, PMI_RANK; srun --mpi=pmix/pmi2, MPICH's hydra) or srun with several tasks
/// (SLURM_STEP_NUM_TASKS > 1 with SLURM_PROCID). A plain run, or a Slurm batch script's single
/// task, is not a launch: no MPI_Init then.
bool launched_by_mpi();

/// Whether text written to file descriptor `fd` goes straight to a terminal that takes control
/// codes ("\r" redraws, "\x1b[K"): fd is a TTY (isatty), TERM is set and not "dumb", and no MPI
/// launcher started the process. Under a launcher a TTY proves nothing: Open MPI's mpirun gives
/// every rank a pseudo-terminal for its stdout whatever mpirun's own output is (a file, a pipe),
/// and copies it there.
bool output_is_terminal(int fd);

/// Whether text on `fd` may be coloured (ANSI escape codes): output_is_terminal(fd) and NO_COLOR
/// unset or empty (no-color.org).
bool colour_output(int fd);

}  // namespace skew
