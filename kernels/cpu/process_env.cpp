// Start-up re-execution with the CPU runtime's environment (kernels/cpu/process_env.h): OpenMP's
// wait policy and OpenBLAS's core, both read by their libraries when they load, before main.
#include "kernels/cpu/process_env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <strings.h>

#include "kernels/cpu/blas_core.h"

namespace skew::cpu {

namespace {

/// Set in the environment of the re-executed image when skew chose the core: "ALONE/ASKED", or
/// "ALONE/ASKED!" when ASKED did not load and the image runs again with OpenBLAS's own ALONE.
constexpr const char* CHOICE_VAR = "SKEW_BLAS_CORE_CHOICE";

struct Outcome {
    std::string source;    // blas_core_source()
    std::string alone;     // OpenBLAS's own pick, when skew chose another
    std::string asked;     // the core skew set in OPENBLAS_CORETYPE
    bool refused = false;  // asked did not load
};

Outcome& outcome() {
    static Outcome o;
    return o;
}

bool same_core(const std::string& a, const std::string& b) { return strcasecmp(a.c_str(), b.c_str()) == 0; }

}  // namespace

void process_env_reexec(char** argv) {
    bool again = false;
    // OpenMP (libgomp) reads OMP_WAIT_POLICY when it loads. Its default spin-wait fights
    // OpenBLAS's own threads and costs 2-10x on small machines (bench/README.md).
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        again = true;
    }
    Outcome& o = outcome();
    const std::string loaded = blas_core_name();
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const char* choice = std::getenv(CHOICE_VAR);
    if (coretype && choice) {  // set by skew's first image, unless the user changed it since
        const std::string c = choice;
        const size_t slash = c.find('/');
        const bool refused = !c.empty() && c.back() == '!';
        const std::string alone = c.substr(0, slash);
        const std::string asked = slash == std::string::npos ? "" : c.substr(slash + 1, c.size() - slash - 1 - refused);
        if (slash != std::string::npos && same_core(coretype, refused ? alone : asked)) {
            o = Outcome{refused ? "openblas" : "cpuid", alone, asked, refused};
            if (!refused && !same_core(loaded, asked) && blas_core_rank(loaded) < blas_core_rank(alone)) {
                // The core asked for did not load and OpenBLAS fell back below its own pick: run
                // once more with that pick.
                setenv("OPENBLAS_CORETYPE", alone.c_str(), 1);
                setenv(CHOICE_VAR, (c + "!").c_str(), 1);
                o.source = "openblas";
                o.refused = true;
                again = true;
            }
        } else {
            o.source = "OPENBLAS_CORETYPE";
        }
    } else if (coretype) {
        o.source = "OPENBLAS_CORETYPE";
    } else {
        const std::string best = blas_core_choice(cpu_vector_features(), loaded, blas_core_available);
        o.source = "openblas";
        if (!best.empty()) {
            setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
            setenv(CHOICE_VAR, (loaded + "/" + best).c_str(), 1);
            o = Outcome{"cpuid", loaded, best, false};
            again = true;
        }
    }
    if (!again) return;
    // The executable's own path (not /proc/self/exe), so the process keeps its name in ps and top.
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    // Only on failure: carry on with the libraries as they loaded.
    if (o.source == "cpuid" && !same_core(loaded, o.asked)) {
        unsetenv("OPENBLAS_CORETYPE");
        unsetenv(CHOICE_VAR);
        o = Outcome{"openblas", "", "", false};
    }
}

std::string blas_core_source() { return outcome().source; }

std::string blas_core_summary() {
    const Outcome& o = outcome();
    const std::string core = blas_core_name();
    if (o.source == "cpuid")
        return fmt::format("OpenBLAS core {} (chosen from cpuid; OpenBLAS alone: {}{})", core, o.alone,
                           same_core(core, o.asked) ? "" : "; asked for " + o.asked);
    if (o.source == "OPENBLAS_CORETYPE")
        return fmt::format("OpenBLAS core {} (OPENBLAS_CORETYPE={})", core, std::getenv("OPENBLAS_CORETYPE"));
    if (o.source == "openblas")
        return fmt::format("OpenBLAS core {} (OpenBLAS's own pick{})", core,
                           o.refused ? "; " + o.asked + " did not load" : "");
    return fmt::format("OpenBLAS core {}", core);
}

}  // namespace skew::cpu
