#include <cuda_fp16.h>
#include "modez.h"
// clean: the sign of a half changed (__hneg, __habs: exact), widened, then mode Z's multiply.
extern "C" __global__ void k(const __half* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    __half h = __hneg(__habs(a[i]));
    out[i] = z(__fmul_rn(z(__half2float(h)), z(b[i])));
}
