// Op-table rows of the host <-> backend copies (tests/backend_ops/op_table.h): copy_to_device then
// copy_to_host of odd byte counts return the bytes unchanged, after synchronize.
#include <cstring>
#include <utility>

#include "tests/backend_ops/op_table.h"

namespace skew::ops {

namespace {

Case copy_case(int64_t n, DT dt, uint32_t seed) {
    Case c;
    c.op = "copy_to_device";
    c.covers = {"copy_to_device", "copy_to_host", "synchronize"};
    c.shape = "round trip n" + std::to_string(n) + " " + dt_name(dt) + " backend->host->backend";
    c.dtypes = dt_name(dt);
    c.t = {input("src", dt, n, seed), output("dst", dt, n, Tol{})};
    const int64_t bytes = n * dt_bytes(dt);
    c.run = [bytes](Backend& be, Bufs& b) {
        std::vector<unsigned char> host(static_cast<size_t>(bytes));
        if (bytes) be.copy_to_host(host.data(), b.ptr(0), bytes);
        be.synchronize();
        if (bytes) be.copy_to_device(b.ptr(1), host.data(), bytes);
        if (bytes) std::memset(host.data(), 0, host.size());  // the copy may be queued: src reusable on return
        be.synchronize();
    };
    c.ref = [](std::vector<Tensor>& t) { t[1].v = t[0].v; };
    c.bytes = 2.0 * double(bytes);
    return c;
}

}  // namespace

void add_memory_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        const PerfDims d = perf_dims(o);
        if (d.set == "paper") {
            Case c = copy_case(int64_t(64) << 20, DT::F32, 1);
            c.shape = "256 MiB round trip";
            out.push_back(std::move(c));
            return;
        }
        // The copy rate at the shape set's working sets (on the CPU: which cache level an op of that
        // size streams from): its activations, the FFN's hidden activations, the embedding table.
        const int64_t N = d.batch * d.seq_len;
        const std::pair<const char*, int64_t> sets[] = {{"activations", N * d.d_model},
                                                        {"FFN hidden", N * d.d_ff},
                                                        {"embedding table", d.padded_vocab * d.d_model}};
        for (const auto& [what, elems] : sets) {
            Case c = copy_case(elems, DT::BF16, 2);
            c.shape = label("%s: %.2f MiB round trip", what, double(elems * 2) / double(1 << 20));
            out.push_back(std::move(c));
        }
        return;
    }
    out.push_back(copy_case(1001, DT::BF16, 1));
    out.push_back(copy_case(3, DT::F32, 2));
    out.push_back(copy_case(0, DT::F32, 3));
}

}  // namespace skew::ops
