// Packed f32x2 arithmetic (sm_100a): audited as scalar f32 ops are.  make_nvrtc.py compiles it
// for compute_100a.
extern "C" __global__ void packed(const float2* a, float2* out) {
    out[0] = __ffma2_rn(a[0], a[1], a[2]);  // contraction
    out[1] = __fadd2_rn(a[0], a[1]);        // clean: explicitly rounded to nearest
    out[2] = __fmul2_rz(a[0], a[1]);        // directed rounding
}
