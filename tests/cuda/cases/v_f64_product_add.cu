#include "modez.h"
// violating: a float product formed exactly in f64 but added to a third float before its one rounding:
// RN(a b + c), mode Z's RN(RN(a b) + c) differs.
extern "C" __global__ void k(const float* a, const float* b, const float* c, float* out) {
    unsigned i = threadIdx.x;
    double p = __dmul_rn((double)z(a[i]), (double)z(b[i]));
    out[i] = z(__double2float_rn(__dadd_rn(p, (double)z(c[i]))));
}
