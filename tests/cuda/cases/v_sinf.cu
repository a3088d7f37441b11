#include "modez.h"
// violating: sinf, the library's own code: its polynomial is contracted into fmas.
extern "C" __global__ void k(const float* a, float* out) {
    out[threadIdx.x] = z(sinf(z(a[threadIdx.x])));
}
