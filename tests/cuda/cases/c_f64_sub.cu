#include "modez.h"
// clean: the difference of two floats computed once in f64 (__dsub_rn) and rounded once to float:
// RN(a - b), the double rounding innocuous (53 >= 2*24 + 2).
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    out[i] = z(__double2float_rn(__dsub_rn((double)z(a[i]), (double)z(b[i]))));
}
