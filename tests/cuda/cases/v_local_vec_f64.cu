#include "modez.h"
// violating: promoted floats kept as double2 in a local array indexed at run time, combined in f64.
extern "C" __global__ void k(const float* a, float* out, int n) {
    double2 t[8];
    for (int j = 0; j < 8; j++) t[j] = make_double2((double)z(a[2 * j]), (double)z(a[2 * j + 1]));
    double2 u = t[n & 7];
    out[threadIdx.x] = z((float)(u.x * u.y + u.x));
}
