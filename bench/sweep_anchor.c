/* The C anchor of the sweep loop (issue 25): an LR sweep from one page written as an expert
 * would write it in C, with the bits of meshnb.sweep in float mode Z.
 *
 * - Structure of arrays across systems: one vector of W floats holds one value of W systems
 *   (GCC vector extensions; W = 16 for AVX-512 code, 8 for AVX2 code, from -DW=...), and BLOCK
 *   groups of W systems are stepped together (-DBLOCK=1 or 2).
 * - DAZ on, FTZ off (float mode Z in hardware: IEEE rounding with gradual underflow, a subnormal
 *   read as its signed zero), and only the words written out (the loss of every step, the final
 *   params) flushed by bit tests (SPEC 2's ftz_bits: subnormal -> signed zero, NaN -> 0x7FFFFFFF).
 * - SPEC 5's sums as the same tree as meshnb.loops.sweep: lane 0 of the butterfly, T(0, 1), where
 *   T(l, 16) = v[l] + v[l + 16] and T(l, o) = T(l, 2o) + T(l + o, 2o) (the lower lane first).
 * - Scheduled for the out-of-order core: a quarter of the warp (8 lanes: l0 + 4k) at a time, each
 *   op done for the 8 lanes before the next (levels, not chains), and the next quarter's Horner
 *   issued before this quarter's terms and tree (a 2-deep software pipeline).
 *
 * sweep_anchor(page, lr_words, m, steps, params_out, ring_out): m systems from the page's words
 * (uint32[1024]), system k with LR word lr_words[k] (SET_LR: ftz_bits of it), `steps` steps from
 * the page's step base; params_out[k][4] the final params' words, ring_out[k][256] the loss word
 * of relative step r at r mod 256.  Returns 0, or -1 when memory runs out.
 * Build: gcc -O3 -ffp-contract=off -DW=16 -mavx512f (or -DW=8 -mavx2), -shared -fPIC: no FMA
 * contraction, no reassociation.  bench/test_bench_sweep_anchor.py builds it, checks its bits
 * against meshnb.sweep, then times both in one run. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef W
#define W 16
#endif
#ifndef BLOCK
#define BLOCK 1
#endif

typedef float vf __attribute__((vector_size(W * 4)));
typedef uint32_t vu __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

enum { W_LR = 4, W_INV = 6, W_NEXT = 7, W_HI = 11, W_X = 16, W_Y = 272, WARP = 32, RING = 256 };

static uint32_t ftz_bits(uint32_t u) {
    if ((u & 0x7F800000u) == 0) return u & 0x80000000u;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFFFFFu;
    return u;
}
static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static vu words(vf v) { /* ftz_bits of every lane, by bit tests */
    vu u = (vu)v;
    vu tiny = (vu)((u & 0x7F800000u) == 0);
    u = (tiny & (u & 0x80000000u)) | (~tiny & u);
    vu nan = (vu)((u & 0x7FFFFFFFu) > 0x7F800000u);
    return (nan & 0x7FFFFFFFu) | (~nan & u);
}

/* The five sums' partial T(l0, 4) of quarter l0 (lanes l0 + 4k), from its 8 errors e[k]: k
 * indexes lane l0 + 4k, so T(l, 16) pairs k and k + 4, T(l, 8) pairs k and k + 2, T(l, 4) k and k + 1. */
#define TREE8(t) (((t)[0] + (t)[4]) + ((t)[2] + (t)[6])) + (((t)[1] + (t)[5]) + ((t)[3] + (t)[7]))
#define TERMS_AND_TREE(e, b, l0, out)                                                              \
    do {                                                                                           \
        vf t[8];                                                                                   \
        out[0] = TREE8(e);                                                                         \
        for (int k = 0; k < 8; k++) t[k] = e[k] * (b)[(l0 + 4 * k) * 4 + 0];                       \
        out[1] = TREE8(t);                                                                         \
        for (int k = 0; k < 8; k++) t[k] = e[k] * (b)[(l0 + 4 * k) * 4 + 1];                       \
        out[2] = TREE8(t);                                                                         \
        for (int k = 0; k < 8; k++) t[k] = e[k] * (b)[(l0 + 4 * k) * 4 + 2];                       \
        out[3] = TREE8(t);                                                                         \
        for (int k = 0; k < 8; k++) t[k] = e[k] * e[k];                                            \
        out[4] = TREE8(t);                                                                         \
    } while (0)

#define HORNER(e, b, l0, pa, pb, pc, pd)                                                           \
    do {                                                                                           \
        vf h[8];                                                                                   \
        for (int k = 0; k < 8; k++) h[k] = pd * (b)[(l0 + 4 * k) * 4];                             \
        for (int k = 0; k < 8; k++) h[k] = h[k] + pc;                                              \
        for (int k = 0; k < 8; k++) h[k] = h[k] * (b)[(l0 + 4 * k) * 4];                           \
        for (int k = 0; k < 8; k++) h[k] = h[k] + pb;                                              \
        for (int k = 0; k < 8; k++) h[k] = h[k] * (b)[(l0 + 4 * k) * 4];                           \
        for (int k = 0; k < 8; k++) h[k] = h[k] + pa;                                              \
        for (int k = 0; k < 8; k++) e[k] = h[k] - (b)[(l0 + 4 * k) * 4 + 3];                       \
    } while (0)

/* One step of one group: params p[0..3] updated, the loss vector returned. */
static inline __attribute__((always_inline)) vf step(vf *p, vf lr, vf inv, const float *b) {
    vf e0[8], e1[8], s0[5], s1[5], s2[5], s3[5];
    vf pa = p[0], pb = p[1], pc = p[2], pd = p[3];
    HORNER(e0, b, 0, pa, pb, pc, pd);
    HORNER(e1, b, 2, pa, pb, pc, pd);
    TERMS_AND_TREE(e0, b, 0, s0);
    HORNER(e0, b, 1, pa, pb, pc, pd);
    TERMS_AND_TREE(e1, b, 2, s1);
    HORNER(e1, b, 3, pa, pb, pc, pd);
    TERMS_AND_TREE(e0, b, 1, s2);
    TERMS_AND_TREE(e1, b, 3, s3);
    vf s[5];
    for (int j = 0; j < 5; j++) s[j] = (s0[j] + s1[j]) + (s2[j] + s3[j]); /* T(0,2) + T(1,2) */
    for (int j = 0; j < 4; j++) p[j] = p[j] - lr * (s[j] * inv);
    return s[4] * inv;
}

int sweep_anchor(const uint32_t *page, const uint32_t *lr_words, uint64_t m, uint64_t steps, uint32_t *params_out,
                 uint32_t *ring_out) {
    /* The batch table [8 slots][32 lanes][x, x^2, x^3, y], slot j = batch (base + j) mod 8,
     * each value broadcast to a vector when read. */
    float tab[8 * WARP * 4] __attribute__((aligned(64)));
    uint64_t base = (uint64_t)page[W_HI] << 32 | page[W_NEXT];
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < WARP; l++) {
            int i = (int)((base + j) & 7) + 8 * l;
            float x = f_of(ftz_bits(page[W_X + i]));
            float x2 = f_of(ftz_bits(u_of(x * x)));
            float *t = tab + (j * WARP + l) * 4;
            t[0] = x; t[1] = x2; t[2] = f_of(ftz_bits(u_of(x2 * x))); t[3] = f_of(ftz_bits(page[W_Y + i]));
        }
    uint64_t groups = (m + W * BLOCK - 1) / (W * BLOCK) * BLOCK;
    vf *state = aligned_alloc(64, sizeof(vf) * 6 * (groups ? groups : 1));
    vf *ring = aligned_alloc(64, sizeof(vf) * RING * (groups ? groups : 1));
    if (!state || !ring) {
        free(state); free(ring);
        return -1;
    }
    memset(ring, 0, sizeof(vf) * RING * (groups ? groups : 1));
    for (uint64_t g = 0; g < groups; g++)
        for (int q = 0; q < W; q++) {
            uint64_t k = g * W + q < m ? g * W + q : m - 1; /* padding lanes copy the last system */
            for (int j = 0; j < 4; j++) state[g * 6 + j][q] = f_of(ftz_bits(page[j]));
            state[g * 6 + 4][q] = f_of(ftz_bits(lr_words[k]));
            state[g * 6 + 5][q] = f_of(ftz_bits(page[W_INV]));
        }
    unsigned old = _mm_getcsr();
    _mm_setcsr((old | 0x0040) & ~0x8000u); /* DAZ on, FTZ off */
    for (uint64_t g = 0; g < groups; g += BLOCK) {
        vf p0[4], lr0 = state[g * 6 + 4], inv0 = state[g * 6 + 5];
        for (int j = 0; j < 4; j++) p0[j] = state[g * 6 + j];
#if BLOCK == 2
        vf p1[4], lr1 = state[(g + 1) * 6 + 4], inv1 = state[(g + 1) * 6 + 5];
        for (int j = 0; j < 4; j++) p1[j] = state[(g + 1) * 6 + j];
#endif
        for (uint64_t r = 0; r < steps; r++) {
            const float *b = tab + (r & 7) * WARP * 4; /* each value splat by the op that reads it */
            vf loss0 = step(p0, lr0, inv0, b);
            ring[g * RING + (r & 255)] = (vf)words(loss0);
#if BLOCK == 2
            vf loss1 = step(p1, lr1, inv1, b);
            ring[(g + 1) * RING + (r & 255)] = (vf)words(loss1);
#endif
        }
        for (int j = 0; j < 4; j++) state[g * 6 + j] = p0[j];
#if BLOCK == 2
        for (int j = 0; j < 4; j++) state[(g + 1) * 6 + j] = p1[j];
#endif
    }
    _mm_setcsr(old);
    for (uint64_t k = 0; k < m; k++) {
        uint64_t g = k / W, q = k % W;
        for (int j = 0; j < 4; j++) params_out[k * 4 + j] = ftz_bits(u_of(state[g * 6 + j][q]));
        for (int r = 0; r < RING; r++) ring_out[k * RING + r] = u_of(ring[g * RING + r][q]);
    }
    free(state); free(ring);
    return 0;
}

/* A clock probe: n rounds of 4 dependent 64-bit multiplies (3 cycles each on every x86 core of
 * the last decade), so cycles = 12 n; the bench divides by the thread's CPU time. */
uint64_t anchor_clock_probe(uint64_t n) {
    uint64_t x = 3;
    for (uint64_t i = 0; i < n; i++)
        __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(x));
    return x;
}
