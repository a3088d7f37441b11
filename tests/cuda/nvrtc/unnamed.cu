// CUDA C++ written as executor teams write it, for the default-deny audit (tests/cuda/test_audit.py,
// UNNAMED_TRUTH): violations of float mode Z that belong to no named class, each in a kernel of its own,
// and clean kernels.  Compiled by NVRTC for compute_80 (make_nvrtc.py).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>

// half arithmetic: the samples in f16.
extern "C" __global__ void half_add(const __half* a, const __half* b, __half* out) {
    out[threadIdx.x] = __hadd(a[threadIdx.x], b[threadIdx.x]);
}

// bf16 arithmetic.
extern "C" __global__ void bf16_mul(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out) {
    out[threadIdx.x] = __hmul(a[threadIdx.x], b[threadIdx.x]);
}

// a float through half and back: a conversion no row allows.
extern "C" __global__ void via_half(const float* a, float* out) {
    out[threadIdx.x] = __half2float(__float2half_rn(a[threadIdx.x]));
}

// the sum of the samples by atomics (the order and the rounding are the hardware's).
extern "C" __global__ void atomic_sum(const float* a, float* out) {
    atomicAdd(out, a[threadIdx.x]);
}

// float to integer, truncating.
extern "C" __global__ void to_int(const float* a, int* out) {
    out[threadIdx.x] = (int)a[threadIdx.x];
}

// copysign and isfinite on floats.
extern "C" __global__ void sign_tests(const float* a, const float* b, float* out) {
    float x = copysignf(a[threadIdx.x], b[threadIdx.x]);
    out[threadIdx.x] = isfinite(x) ? x : 0.0f;
}

// a texture read of floats.
extern "C" __global__ void texture_read(cudaTextureObject_t t, float* out) {
    out[threadIdx.x] = tex1Dfetch<float>(t, threadIdx.x);
}

// a saturated add (__saturatef of a sum).
extern "C" __global__ void saturated(const float* a, float* out) {
    out[threadIdx.x] = __saturatef(__fadd_rn(a[threadIdx.x], a[threadIdx.x + 1]));
}

// an f32 reciprocal, correctly rounded: 1/b then a product is two roundings, not mode Z's a/b.
extern "C" __global__ void reciprocal(const float* a, float* out) {
    out[threadIdx.x] = __fmul_rn(a[threadIdx.x], __frcp_rn(a[threadIdx.x + 1]));
}

// a tensor-core product of halves into floats (wmma).
extern "C" __global__ void tensor_core(const __half* a, const __half* b, float* c) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

// f64 work on promoted floats through memory: stored to local memory (a dynamic index keeps the array
// there) or shared memory, loaded back through another address register, then multiplied or added in
// f64.  A double-rounding finding each: the audit follows the value through the variable.
extern "C" __global__ void local_f64(const float* a, float* out, int k) {
    double t[8];
    for (int i = 0; i < 8; i++) t[i] = (double)a[i];
    out[threadIdx.x] = (float)(t[k & 7] * t[(k + 1) & 7]);
}

extern "C" __global__ void shared_f64(const float* a, float* out) {
    __shared__ double s[64];
    s[threadIdx.x] = (double)a[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = (float)(s[threadIdx.x ^ 1] + s[threadIdx.x]);
}

// clean: floats through local memory (a dynamic index), added with .rn.
extern "C" __global__ void local_f32(const float* a, float* out, int k) {
    float t[8];
    for (int i = 0; i < 8; i++) t[i] = a[i];
    out[threadIdx.x] = __fadd_rn(t[k & 7], t[(k + 1) & 7]);
}

// clean: SPEC 2's operations, rounded to nearest, the flush by bit operations, u32 -> f32.
__device__ float flushz(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) u = 0x7FFFFFFFu;
    return __uint_as_float(u);
}

extern "C" __global__ void clean_ops(const float* a, float* out) {
    unsigned i = threadIdx.x;
    float x = flushz(__fdiv_rn(__uint2float_rn(i), 128.0f));
    float y = flushz(__fmul_rn(a[i], x));
    y = flushz(__fadd_rn(y, a[i + 1]));
    y = flushz(__fsub_rn(y, fabsf(a[i + 2])));
    y = fmaxf(y, -a[i + 3]);
    y = __shfl_xor_sync(0xFFFFFFFFu, y, 1) < y ? y : 0.0f;
    float4 v = reinterpret_cast<const float4*>(a)[i];
    out[i] = flushz(__fadd_rn(y, __fsqrt_rn(flushz(__fadd_rn(v.x, v.w)))));
}
