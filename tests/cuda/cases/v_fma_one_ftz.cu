#include "modez.h"
// violating: an fma by 1.0 under --ftz=true: the hardware's flush of inputs before rounding.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    float r;
    asm("fma.rn.ftz.f32 %0, 0f3F800000, %1, %2;" : "=f"(r) : "f"(z(a[threadIdx.x])), "f"(z(b[threadIdx.x])));
    out[threadIdx.x] = z(r);
}
