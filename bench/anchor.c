/* The C anchor of the single step loop: the bits of meshnb.loops (float mode Z with the x86 DAZ
 * bit on and FTZ off, 8-float AVX vectors, only the words written out flushed), as plain C.
 *
 * anchor_run(words, n, trace): n steps of one system without a group from the page's
 * STEP_HI:NEXT_STEP as one task, on the page's words (uint32[1024], updated as loops.run_tasks
 * does), the applied sums into trace (5 u32 a step; NULL for none).
 * Build: gcc -O3 -mavx2 -ffp-contract=off -shared -fPIC (no FMA, no reassociation; at -O2 gcc
 * 12 keeps the per-lane arrays in memory and runs at ~28 ns a step).
 * bench/test_bench_anchor.py builds it, checks its bits against meshnb's, then times both. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { W_LR = 4, W_INV = 6, W_NEXT = 7, W_HI = 11, W_X = 16, W_Y = 272, W_LOSS = 528, TAB = 256 };

static uint32_t ftz_bits(uint32_t u) { /* SPEC 2: subnormal -> signed zero, NaN -> 0x7FFFFFFF */
    if ((u & 0x7F800000u) == 0) return u & 0x80000000u;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFFFFFu;
    return u;
}
static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static __m256 total(__m256 q0, __m256 q1, __m256 q2, __m256 q3) { /* SPEC 5's butterfly, lane 0.. */
    __m256 s = _mm256_add_ps(_mm256_add_ps(q0, q2), _mm256_add_ps(q1, q3));
    s = _mm256_add_ps(s, _mm256_permute2f128_ps(s, s, 1));
    s = _mm256_add_ps(s, _mm256_shuffle_ps(s, s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_add_ps(s, _mm256_shuffle_ps(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
}

void anchor_run(uint32_t *w, uint64_t n, uint32_t *trace) {
    float *tab = aligned_alloc(32, 4 * TAB * 4);
    for (int g = 0; g < 8; g++)
        for (int l = 0; l < 32; l++) {
            int i = g + 8 * l, at = g * 32 + l;
            float x = f_of(ftz_bits(w[W_X + i]));
            float x2 = f_of(ftz_bits(u_of(x * x)));
            tab[at] = x; tab[at + TAB] = x2; tab[at + 2 * TAB] = f_of(ftz_bits(u_of(x2 * x)));
            tab[at + 3 * TAB] = f_of(ftz_bits(w[W_Y + i]));
        }
    unsigned old = _mm_getcsr();
    _mm_setcsr((old | 0x0040) & ~0x8000u); /* DAZ on, FTZ off */
    __m256 p[4];
    for (int j = 0; j < 4; j++) p[j] = _mm256_set1_ps(f_of(ftz_bits(w[j])));
    float inv = f_of(ftz_bits(w[W_INV]));
    __m256 lr8 = _mm256_set1_ps(f_of(ftz_bits(w[W_LR]))), inv8 = _mm256_set1_ps(inv);
    uint64_t base = (uint64_t)w[W_HI] << 32 | w[W_NEXT];
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t = base + i;
        const float *b = tab + (t & 7) * 32;
        __m256 v[4][5];
        for (int k = 0; k < 4; k++) {
            __m256 x = _mm256_load_ps(b + 8 * k), x2 = _mm256_load_ps(b + TAB + 8 * k);
            __m256 x3 = _mm256_load_ps(b + 2 * TAB + 8 * k), y = _mm256_load_ps(b + 3 * TAB + 8 * k);
            __m256 pr = _mm256_add_ps(_mm256_mul_ps(p[3], x), p[2]);
            pr = _mm256_add_ps(_mm256_mul_ps(pr, x), p[1]);
            pr = _mm256_add_ps(_mm256_mul_ps(pr, x), p[0]);
            __m256 e = _mm256_sub_ps(pr, y);
            v[k][0] = e; v[k][1] = _mm256_mul_ps(e, x); v[k][2] = _mm256_mul_ps(e, x2);
            v[k][3] = _mm256_mul_ps(e, x3); v[k][4] = _mm256_mul_ps(e, e);
        }
        __m256 s[4];
        for (int j = 0; j < 4; j++) s[j] = total(v[0][j], v[1][j], v[2][j], v[3][j]);
        __m256 s4 = _mm256_add_ps(_mm256_add_ps(v[0][4], v[2][4]), _mm256_add_ps(v[1][4], v[3][4]));
        __m128 e4 = _mm_add_ps(_mm256_castps256_ps128(s4), _mm256_extractf128_ps(s4, 1));
        __m128 e2v = _mm_add_ps(e4, _mm_movehl_ps(e4, e4));
        float e2 = _mm_cvtss_f32(e2v) + _mm_cvtss_f32(_mm_shuffle_ps(e2v, e2v, 1));
        for (int j = 0; j < 4; j++) p[j] = _mm256_sub_ps(p[j], _mm256_mul_ps(lr8, _mm256_mul_ps(s[j], inv8)));
        w[W_LOSS + (t & 255)] = ftz_bits(u_of(e2 * inv));
        if (trace) {
            uint32_t *row = trace + 5 * i;
            for (int j = 0; j < 4; j++) row[j] = ftz_bits(u_of(_mm256_cvtss_f32(s[j])));
            row[4] = ftz_bits(u_of(e2));
        }
    }
    _mm_setcsr(old);
    free(tab);
    for (int j = 0; j < 4; j++) w[j] = ftz_bits(u_of(_mm256_cvtss_f32(p[j])));
    uint64_t nxt = base + n;
    w[8] = 0; /* ERR */
    w[9] = 0; /* PENDING */
    w[W_HI] = (uint32_t)(nxt >> 32);
    w[W_NEXT] = (uint32_t)nxt;
}
