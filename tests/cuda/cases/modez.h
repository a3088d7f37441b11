// Float mode Z's flush and canonical NaN in integer bits (SPEC 2), as an executor team writes it.
#pragma once
__device__ __forceinline__ float z(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) u = 0x7FFFFFFFu;
    return __uint_as_float(u);
}
