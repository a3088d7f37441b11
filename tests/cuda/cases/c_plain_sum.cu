#include "modez.h"
// clean: a plain C sum of two loaded floats (add.f32 with no rounding modifier): no multiply feeds it
// and its result feeds none, so nothing can be fused: it is RN(a + b).
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    out[i] = z(z(a[i]) + z(b[i]));
}
