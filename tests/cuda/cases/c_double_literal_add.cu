#include "modez.h"
// clean: x + 1.0 computed once in f64 and rounded once to float is RN(x + 1) (53 >= 2*24 + 2 bits:
// the double rounding is innocuous for one add of two floats).
extern "C" __global__ void k(const float* a, float* out) {
    unsigned i = threadIdx.x;
    float x = z(a[i]);
    out[i] = z((float)(x + 1.0));
}
