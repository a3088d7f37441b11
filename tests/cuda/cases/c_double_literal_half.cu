#include "modez.h"
// clean: a double literal (0.5, not 0.5f) promotes to f64; x * 0.5 is exact in f64 and rounded once.
extern "C" __global__ void k(const float* a, float* out) {
    unsigned i = threadIdx.x;
    float x = z(a[i]);
    out[i] = z((float)(x * 0.5));
}
