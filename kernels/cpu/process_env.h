// The process environment the CPU backend needs before its libraries load: OpenMP's wait policy
// and OpenBLAS's core are read when libgomp and OpenBLAS load (before main), so a program that
// wants them set re-executes itself once with them (docs/cpu-performance.md).
#pragma once
#include <string>

namespace skew::cpu {

/// Call first in main. Unless the user set them: OMP_WAIT_POLICY=passive (libgomp's default
/// spin-wait fights OpenBLAS's threads on small machines) and OPENBLAS_CORETYPE = the best core
/// this OpenBLAS has for the processor (blas_core_choice) when it ranks above OpenBLAS's own pick;
/// then runs its own executable (/proc/self/exe's target) again with the same arguments (the same
/// pid: mpirun and srun never see it). In the re-executed image it checks that OpenBLAS loaded the
/// core asked for; one that loaded a lower-ranked core than OpenBLAS's own pick runs once more with
/// that pick. Returns normally when nothing needs setting or an exec fails (the process carries on
/// as it is); the outcome is what blas_core_name / blas_core_source / blas_core_summary report.
/// `argv` is main's.
void process_env_reexec(char** argv);

/// How this process's OpenBLAS core was decided: "OPENBLAS_CORETYPE" (set by the user),
/// "cpuid" (chosen by skew at start-up), "openblas" (OpenBLAS's own pick, kept), or "" where no
/// start-up choice ran (a library or test that does not call process_env_reexec).
std::string blas_core_source();

/// One log line: the core, how it was decided, and OpenBLAS's own pick when skew replaced it, e.g.
/// "OpenBLAS core Cooperlake (chosen from cpuid; OpenBLAS alone: Haswell)".
std::string blas_core_summary();

}  // namespace skew::cpu
