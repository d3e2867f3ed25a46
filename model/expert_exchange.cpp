// Expert parallelism's exchange of a MoE block's rows (docs/distributed.md, "Expert parallel"):
// the per-expert row counts shared over the group, the received rows laid out in expert order,
// and the all-to-alls to and from the experts' owners.
#include "model/expert_exchange.h"

#include <vector>

#include "engine/error.h"

namespace skew {

namespace {

void ep_alltoallv(Model& m, const bf16* send, const std::vector<int64_t>& send_rows,
                  const std::vector<int64_t>& send_displs, bf16* recv, const std::vector<int64_t>& recv_rows,
                  const std::vector<int64_t>& recv_displs, int64_t C) {
    const size_t M = size_t(m.ep.M);
    std::vector<int64_t> sc(M), sd(M), rc(M), rd(M);
    for (size_t j = 0; j < M; ++j) {
        sc[j] = send_rows[j] * C;
        sd[j] = send_displs[j] * C;
        rc[j] = recv_rows[j] * C;
        rd[j] = recv_displs[j] * C;
    }
    m.ep.comm->alltoallv(send, sc, sd, recv, rc, rd, CommDType::BF16);
}

}  // namespace

// Plan this microbatch's exchange of MoE block rows from the routing (a.expert_offsets over all E
// experts, this rank's tokens): exchange the per-expert row counts with every rank of the group,
// then lay the received rows out in expert order (within an expert, by source rank: the order one
// process would see the group's concatenated tokens in) and upload that permutation both ways
// and the local expert offsets. Host state in m.ep for the exchanges of this block.
void ep_plan_exchange(Model& m, int64_t bi) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const ModelConfig& mc = m.cfg->model;
    const struct { int64_t E, NK; } x{mc.n_experts, m.microbatch * m.seq_len * mc.top_k};
    const int64_t M = m.ep.M, El = m.ep.El;
    if (!m.ep.comm)
        fail("model: parallel.expert is {} but no expert-parallel group was attached (model_set_expert_comm)", M);
    std::vector<int64_t> offsets(static_cast<size_t>(x.E + 1)), counts(static_cast<size_t>(2 * x.E));
    be.copy_to_host(offsets.data(), a.expert_offsets[size_t(bi)], int64_t(offsets.size() * sizeof(int64_t)));
    for (int64_t e = 0; e < x.E; ++e) counts[size_t(e)] = offsets[size_t(e + 1)] - offsets[size_t(e)];
    be.copy_to_device(a.ep_counts, counts.data(), int64_t(size_t(x.E) * sizeof(int64_t)));
    const std::vector<int64_t> el_counts(size_t(M), El);
    std::vector<int64_t> el_displs(static_cast<size_t>(M));
    for (int64_t j = 0; j < M; ++j) el_displs[size_t(j)] = j * El;
    m.ep.comm->alltoallv(a.ep_counts, el_counts, el_displs, a.ep_counts + x.E, el_counts, el_displs, CommDType::I64);
    be.copy_to_host(counts.data() + x.E, a.ep_counts + x.E, int64_t(size_t(x.E) * sizeof(int64_t)));
    const int64_t* c = counts.data() + x.E;  // c[i * El + e]: rows from rank i for local expert e

    ExpertParallelState& s = m.ep;
    s.send_rows.assign(size_t(M), 0);
    s.send_row_displs.assign(size_t(M), 0);
    s.recv_rows.assign(size_t(M), 0);
    s.recv_row_displs.assign(size_t(M), 0);
    for (int64_t j = 0; j < M; ++j) {
        s.send_row_displs[size_t(j)] = offsets[size_t(j * El)];
        s.send_rows[size_t(j)] = offsets[size_t((j + 1) * El)] - offsets[size_t(j * El)];
    }
    int64_t R = 0;
    for (int64_t i = 0; i < M; ++i) {
        s.recv_row_displs[size_t(i)] = R;
        for (int64_t e = 0; e < El; ++e) {
            if (c[i * El + e] < 0) fail("model: expert parallel: rank {} sent a negative row count", i);
            s.recv_rows[size_t(i)] += c[i * El + e];
        }
        R += s.recv_rows[size_t(i)];
    }
    if (R > M * x.NK) fail("model: expert parallel: {} rows received, beyond the {} the plan holds", R, M * x.NK);
    s.recv_total = R;
    // expert-major position p <- source-major position q
    std::vector<int64_t> perm(static_cast<size_t>(R)), inv(static_cast<size_t>(R)),
        local_offsets(static_cast<size_t>(El + 1));
    std::vector<int64_t> src_at(static_cast<size_t>(M * El));  // source-major start of block (i, e)
    for (int64_t i = 0; i < M; ++i) {
        int64_t q = s.recv_row_displs[size_t(i)];
        for (int64_t e = 0; e < El; ++e) {
            src_at[size_t(i * El + e)] = q;
            q += c[i * El + e];
        }
    }
    int64_t p = 0;
    for (int64_t e = 0; e < El; ++e) {
        local_offsets[size_t(e)] = p;
        for (int64_t i = 0; i < M; ++i)
            for (int64_t r = 0; r < c[i * El + e]; ++r, ++p) {
                perm[size_t(p)] = src_at[size_t(i * El + e)] + r;
                inv[size_t(perm[size_t(p)])] = p;
            }
    }
    local_offsets[size_t(El)] = R;
    be.copy_to_device(a.ep_perm, perm.data(), int64_t(perm.size() * sizeof(int64_t)));
    be.copy_to_device(a.ep_perm_inv, inv.data(), int64_t(inv.size() * sizeof(int64_t)));
    be.copy_to_device(a.ep_offsets, local_offsets.data(), int64_t(local_offsets.size() * sizeof(int64_t)));
}

// Rows (NK, C) of this rank's token copies in global expert order -> the owners' expert-order
// rows dst (R, C): all-to-all into ep_recv (source-rank order), then the permutation.
void ep_to_owners(Model& m, const bf16* rows, bf16* dst, int64_t C) {
    ExpertParallelState& s = m.ep;
    ep_alltoallv(m, rows, s.send_rows, s.send_row_displs, m.act.ep_recv, s.recv_rows, s.recv_row_displs, C);
    m.backend->moe_gather_forward(dst, m.act.ep_recv, m.act.ep_perm, s.recv_total, 1, C);
}

// The reverse: this rank's expert-order rows src (R, C) -> each source rank's rows (NK, C) in its
// global expert order (the inverse permutation into ep_recv, then the all-to-all back).
void ep_from_owners(Model& m, const bf16* src, bf16* rows, int64_t C) {
    ExpertParallelState& s = m.ep;
    m.backend->moe_gather_forward(m.act.ep_recv, src, m.act.ep_perm_inv, s.recv_total, 1, C);
    ep_alltoallv(m, m.act.ep_recv, s.recv_rows, s.recv_row_displs, rows, s.send_rows, s.send_row_displs, C);
}

}  // namespace skew
