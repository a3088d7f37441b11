#include <cuda_fp16.h>
#include "modez.h"
// clean: halves read and widened to float (exact: every half is a float), then mode Z's add.
extern "C" __global__ void k(const __half* a, const __half* b, float* out) {
    unsigned i = threadIdx.x;
    out[i] = z(__fadd_rn(z(__half2float(a[i])), z(__half2float(b[i]))));
}
