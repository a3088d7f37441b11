/* The reference kernels (SPEC 2, 4, 5, 6) in float mode Z, written from SPEC.md for meshnb's tests. */
#ifndef MESH_REF_CUBIC_H
#define MESH_REF_CUBIC_H
#include <math.h>
#include <string.h>

#include "mesh/abi/view_train.h"

static inline uint32_t mesh__f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float mesh__u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
/* Mode Z on a rounded result (or an input): NaN -> 7FFFFFFF, subnormal -> zero of its sign. */
static inline float mesh__z(float r) {
  uint32_t u = mesh__f2u(r);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return mesh__u2f(0x7FFFFFFFu);
  if ((u & 0x7F800000u) == 0) return mesh__u2f(u & 0x80000000u);
  return r;
}
static inline float mesh_ftz_add(float a, float b) { return mesh__z(mesh__z(a) + mesh__z(b)); }
static inline float mesh_ftz_sub(float a, float b) { return mesh__z(mesh__z(a) - mesh__z(b)); }
static inline float mesh_ftz_mul(float a, float b) { return mesh__z(mesh__z(a) * mesh__z(b)); }
static inline float mesh_ftz_div(float a, float b) { return mesh__z(mesh__z(a) / mesh__z(b)); }
static inline float mesh_ftz_from_u32(uint32_t u) { return mesh__z((float)u); }
static inline float mesh_ftz_from_bits(uint32_t u) { return mesh__z(mesh__u2f(u)); }
static inline uint32_t mesh_ftz_bits(float f) { return mesh__f2u(mesh__z(f)); }

/* The applied sums of the system this thread runs (the host's trace), or NULL. */
static __thread uint32_t *mesh__trace;
static __thread uint64_t mesh__traced, mesh__trace_cap;

static inline void mesh_cubic_samples(float *xs, float *ys) {
  float h = mesh_ftz_div(2.0f, mesh_ftz_from_u32(255));
  for (uint32_t i = 0; i < MESH_TRAIN_SAMPLES; i++) {
    float x = mesh_ftz_add(-1.0f, mesh_ftz_mul(mesh_ftz_from_u32(i), h));
    double ax = fabs((double)x), r = ax > 0.5 ? 1.0 - ax : ax;
    float s = (float)sin(M_PI * r);
    xs[i] = x;
    ys[i] = x < 0 ? -s : s;
  }
}

static inline void mesh_cubic_step_sums(const float p[4], const float *xs, const float *ys, uint32_t off, float sums[5]) {
  uint32_t g = off % 8;
  float v[MESH_TRAIN_WARP][5], w[MESH_TRAIN_WARP][5];
  for (int l = 0; l < MESH_TRAIN_WARP; l++) {
    float x = xs[g + 8 * l], y = ys[g + 8 * l];
    float x2 = mesh_ftz_mul(x, x), x3 = mesh_ftz_mul(x2, x);
    float pred = mesh_ftz_add(
        mesh_ftz_mul(mesh_ftz_add(mesh_ftz_mul(mesh_ftz_add(mesh_ftz_mul(p[3], x), p[2]), x), p[1]), x), p[0]);
    float e = mesh_ftz_sub(pred, y);
    v[l][0] = e;
    v[l][1] = mesh_ftz_mul(e, x);
    v[l][2] = mesh_ftz_mul(e, x2);
    v[l][3] = mesh_ftz_mul(e, x3);
    v[l][4] = mesh_ftz_mul(e, e);
  }
  for (int o = 16; o >= 1; o >>= 1) {
    for (int l = 0; l < MESH_TRAIN_WARP; l++)
      for (int j = 0; j < 5; j++) w[l][j] = mesh_ftz_add(v[l][j], v[l ^ o][j]);
    memcpy(v, w, sizeof v);
  }
  for (int j = 0; j < 5; j++) sums[j] = v[0][j];
}

static inline void mesh_cubic_apply(float p[4], const float sums[5], float lr, float inv) {
  if (mesh__trace && mesh__traced < mesh__trace_cap) {
    for (int j = 0; j < 5; j++) mesh__trace[5 * mesh__traced + j] = mesh__f2u(sums[j]);
    mesh__traced++;
  }
  for (int j = 0; j < 4; j++) p[j] = mesh_ftz_sub(p[j], mesh_ftz_mul(lr, mesh_ftz_mul(sums[j], inv)));
}

static inline float mesh_cubic_loss(const float sums[5], float inv) { return mesh_ftz_mul(sums[4], inv); }
#endif
