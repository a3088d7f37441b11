#include "modez.h"
// violating: expf under --use_fast_math: ex2.approx with the hardware flush.
extern "C" __global__ void k(const float* a, float* out) {
    out[threadIdx.x] = z(expf(z(a[threadIdx.x])));
}
