// The shared matmul argument checks (kernels/matmul_args.h), compiled once into skew_kernels_host,
// which both backends link through skew_kernels_common.
#include "kernels/matmul_args.h"

#include "engine/error.h"

namespace skew {

void matmul_check_args(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) {
    const int64_t m = s.m, n = s.n, k = s.k;
    if (m < 0) fail("matmul m: negative size {}", m);
    if (n < 0) fail("matmul n: negative size {}", n);
    if (k < 0) fail("matmul k: negative size {}", k);
    if (m == 0 || n == 0) return;
    if (!c.data) fail("matmul: null output for a {}x{} product", m, n);
    if (k > 0 && (!a.data || !b.data)) fail("matmul: null operand for a {}x{}x{} product", m, n, k);
}

}  // namespace skew
