// Host/device qualifiers for math shared by the CPU backend and the CUDA kernels.
// Everything in kernels/common/ is plain arithmetic on scalars, callable from both sides.
#pragma once

#if defined(__CUDACC__)
#define SKEW_HD __host__ __device__ __forceinline__
#else
#define SKEW_HD inline
#endif
