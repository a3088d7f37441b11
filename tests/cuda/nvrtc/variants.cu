// CUDA C++ variants of one piece of the train program each, compiled by NVRTC (make_nvrtc.py) for
// tests/cuda/test_audit.py.  The findings each kernel must give are written by hand in the test
// (NVRTC_TRUTH), from what the source asks for, not from the audit's output.
#define PI 3.141592653589793

// SPEC 4's sample: r = 1 - |x| in f64 (exact), sin(pi r), one rounding to f32.  Clean.
extern "C" __global__ void spec4_sin_pi(const float* xs, float* ys) {
    float x = xs[threadIdx.x];
    double ax = fabs((double)x);
    double r = ax > 0.5 ? 1.0 - ax : ax;
    float y = (float)sin(PI * r);
    ys[threadIdx.x] = signbit(x) ? -y : y;
}

// The product by pi reaches no sine: the reduction, the product and the add are f32 work in f64.
extern "C" __global__ void pi_no_sine(const float* xs, float* ys) {
    float x = xs[threadIdx.x];
    double r = 1.0 - fabs((double)x);
    double p = PI * r;
    ys[threadIdx.x] = (float)(p - r);
}

// (pi r)^2: the reduction, the product and the square.
extern "C" __global__ void pi_r_squared(const float* xs, float* ys) {
    float x = xs[threadIdx.x];
    double r = 1.0 - fabs((double)x);
    double p = PI * r;
    ys[threadIdx.x] = (float)(p * p);
}

// (pi r)^2 beside a sine of pi r: the sine is legitimate, the square (a factor of pi r, fused by
// NVVM into the sine's add: fma(p, p, sin p)) is not; the reduction reaches the sine.
extern "C" __global__ void pi_r_squared_and_sine(const float* xs, float* ys) {
    float x = xs[threadIdx.x];
    double r = 1.0 - fabs((double)x);
    double p = PI * r;
    ys[threadIdx.x] = (float)(p * p + sin(p));
}

// An f64 Horner in a function of its own: three fma.rn.f64 on promoted values, through .param.
__noinline__ __device__ double horner64(double x, double a, double b, double c, double d) {
    return ((d * x + c) * x + b) * x + a;
}

extern "C" __global__ void horner_f64_call(const float* p, float* out) {
    float x = p[4 + threadIdx.x];
    out[threadIdx.x] = (float)horner64((double)x, (double)p[0], (double)p[1], (double)p[2], (double)p[3]);
}

// Directed rounding: __fmul_rz, __fsub_rd, __fdiv_ru, __uint2float_rz.
extern "C" __global__ void directed(const float* a, const unsigned* u, float* out) {
    out[0] = __fmul_rz(a[0], a[1]);
    out[1] = __fsub_rd(a[0], a[1]);
    out[2] = __fdiv_ru(a[0], a[1]);
    out[3] = __uint2float_rz(u[0]);
}

// An fma in inline asm, on one line inside its own { } block.
extern "C" __global__ void inline_asm_fma(const float* a, float* out) {
    float y;
    asm("{ .reg .f32 t; mov.f32 t, %1; fma.rn.f32 %0, t, %2, %3; }" : "=f"(y) : "f"(a[0]), "f"(a[1]), "f"(a[2]));
    out[0] = y;
}

// Plain C: a * b + c contracted (NVRTC's default --fmad=true), a - b left unrounded.
extern "C" __global__ void naive(const float* a, float* out) {
    out[0] = a[0] * a[1] + a[2];
    out[1] = a[0] - a[1];
}

// Every op rounded on its own (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn): clean.
extern "C" __global__ void per_op(const float* a, float* out) {
    out[0] = __fadd_rn(__fmul_rn(a[0], a[1]), a[2]);
    out[1] = __fdiv_rn(__fsqrt_rn(a[0]), a[1]);
}

// Approximate intrinsics: __fdividef, __sinf.
extern "C" __global__ void approx(const float* a, float* out) {
    out[0] = __fdividef(a[0], a[1]);
    out[1] = __sinf(a[2]);
}
