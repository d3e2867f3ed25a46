// One model step against an independent reference's records (tests/reference/model/make_golden*.py):
// loss parts, routing counts, probed logits and every parameter gradient, under the limits of the
// comparison with the exact float64 equations (their derivation: tests/model/test_golden.cpp).
// Shared by the golden tests of the paper's block and of the Llama-family block.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "golden_fixture.h"
#include "model/model.h"
#include "model_test_util.h"

namespace skew::test {

/// Limits against the exact equations: relative error of the LM, balance and total loss (z: 5x,
/// a square of the lse), of the probed logits, of each gradient tensor, and of each gradient's
/// projection scale <g, ref> / <ref, ref> from 1.
struct GoldenLimits {
    double loss_rel = 3e-3;
    double logits_rel = 2e-2;
    double grad_rel = 5e-2;
    double grad_scale = 3e-2;
};

/// The worst gradient error, its tensor, and the logits' error of one comparison.
struct GoldenWorst {
    double grad = 0.0;
    std::string grad_name;
    double logits = 0.0;
};

/// CHECKs lp (the step's loss parts, n_moe routed blocks' counts, probed logits) and m's gradients
/// against `ref` under `lim`; `extra(p, err)` adds a parameter's own check of its gradient error.
/// SKEW_GOLDEN_VERBOSE prints every tensor's error under `tag`.
inline GoldenWorst check_against_golden(const LossParts& lp, const Model& m, std::map<std::string, GoldenRecord>& ref,
                                        size_t n_moe, const GoldenLimits& lim, const std::string& tag,
                                        const std::function<void(const ParamRef&, double)>& extra = {}) {
    const auto& loss = ref["loss"].data;  // lm, balance, z, total
    INFO(tag << ": lm " << lp.lm_loss << " vs " << loss[0] << ", balance " << lp.balance_loss << " vs " << loss[1]
             << ", z " << lp.z_loss << " vs " << loss[2]);
    CHECK(std::fabs(lp.lm_loss - loss[0]) <= lim.loss_rel * std::fabs(loss[0]));
    CHECK(std::fabs(lp.balance_loss - loss[1]) <= lim.loss_rel * std::fabs(loss[1]));
    CHECK(std::fabs(lp.z_loss - loss[2]) <= 5 * lim.loss_rel * std::fabs(loss[2]));
    CHECK(std::fabs(lp.total - loss[3]) <= lim.loss_rel * std::fabs(loss[3]));

    // routing: the same experts chosen (counts per expert, exact)
    REQUIRE(lp.moe.size() == n_moe);
    for (size_t i = 0; i < lp.moe.size(); ++i) {
        const auto& rc = ref["counts." + std::to_string(i)].data;
        REQUIRE(lp.moe[i].counts.size() == rc.size());
        for (size_t e = 0; e < rc.size(); ++e) {
            INFO("MoE block " << lp.moe[i].block << " expert " << e);
            CHECK(lp.moe[i].counts[e] == int64_t(rc[e]));
        }
    }

    GoldenWorst w;
    w.logits = rel_err(lp.probe_logits, ref["logits"].data);
    INFO("logits rel err " << w.logits);
    CHECK(w.logits <= lim.logits_rel);

    for (const ParamRef& p : m.params) {
        const auto& g = ref["grad." + p.info->name].data;
        const std::vector<float> gh = grad_host(p);
        const double e = rel_err(gh, g);
        double dot = 0.0, rr = 0.0;
        for (size_t i = 0; i < g.size(); ++i) dot += double(gh[i]) * g[i], rr += double(g[i]) * g[i];
        const double scale = rr > 0 ? dot / rr : 1.0;
        if (!(e <= w.grad)) w.grad = e, w.grad_name = p.info->name;
        if (std::getenv("SKEW_GOLDEN_VERBOSE"))
            std::fprintf(stderr, "%s %s rel err %.5f scale %.5f\n", tag.c_str(), p.info->name.c_str(), e, scale);
        INFO("grad." << p.info->name << " rel err " << e << ", scale " << scale << " (|ref| max " << max_abs(g) << ")");
        CHECK(e <= lim.grad_rel);
        if (extra) extra(p, e);
        CHECK(std::fabs(scale - 1.0) <= lim.grad_scale);
    }
    return w;
}

}  // namespace skew::test
