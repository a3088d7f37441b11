/* A port of the seed's train program (shared/seed/train.c) to a plain C host, written from SPEC.md as an
 * executor team would write it, for `meshnb check PACK --exec`. It is NOT derived from meshnb's code or its
 * fault models. Compiled as it is it is the correct port (the control); each FAULT_* macro (or compiler flag,
 * see faulty.py) puts in ONE porting mistake.
 *
 * usage: train_port N GROUP STEPS SPT BASE INIT OUT_DIR IN_0 .. IN_{N-1} [BEFORE:WORD | T:K:ROUND ...]
 *   N systems (GROUP 1: a cluster with an exchange page), STEPS steps from step BASE (decimal u64),
 *   INIT 1: run init (then set STEP_HI:NEXT_STEP = BASE, STEPS_PER_TASK = SPT), else load IN_K;
 *   writes OUT_DIR/out-K.page and OUT_DIR/trace.bin (system 0's applied sums); BEFORE:WORD is a SET_LR
 *   (hex word) made when BEFORE steps of this run are done; T:K:ROUND makes system K's round ROUND (decimal)
 *   time out once (the host injects it: the counter published, then false). Cluster members run as threads. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef FAULT_MXCSR
#include <xmmintrin.h>
#endif

/* ---- views::train (SPEC 7) ---- */
enum {
  T_PARAMS = 0, T_LR = 16, T_STEPS_PER_TASK = 20, T_INV_BATCH = 24, T_NEXT_STEP = 28, T_ERR = 32,
  T_PENDING = 36, T_ROUND = 40, T_STEP_HI = 44, T_X = 64, T_Y = 1088, T_LOSS = 2112, VIEW_BYTES = 4096,
  SAMPLES = 256, WARP = 32, SLOT_WORDS = 8
};

static uint32_t get_u32(const uint8_t *v, int off) { uint32_t u; memcpy(&u, v + off, 4); return u; }
static void set_u32(uint8_t *v, int off, uint32_t u) { memcpy(v + off, &u, 4); }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- float mode Z (SPEC 2) ---- */
#ifdef FAULT_MXCSR
/* The hardware does the flush: FTZ + DAZ set in MXCSR (by each thread, see system_main); only NaNs are made
 * canonical in software. */
static float z(float r) { return isnan(r) ? u2f(0x7FFFFFFFu) : r; }
#define IN(a) (a)
#else
static float z(float r) {
  if (isnan(r)) return u2f(0x7FFFFFFFu);
  uint32_t u = f2u(r);
#ifdef FAULT_FLUSH_POSITIVE_ZERO
  if ((u & 0x7F800000u) == 0) return 0.0f; /* "flush to zero": +0 whatever the sign */
#else
  if ((u & 0x7F800000u) == 0) return u2f(u & 0x80000000u);
#endif
  return r;
}
#define IN(a) z(a)
#endif
static float zadd(float a, float b) { return z(IN(a) + IN(b)); }
static float zsub(float a, float b) { return z(IN(a) - IN(b)); }
static float zmul(float a, float b) { return z(IN(a) * IN(b)); }
static float zdiv(float a, float b) { return z(IN(a) / IN(b)); }
static float zfrom_u32(uint32_t u) { return z((float)u); }
static float ftz_from_bits(uint32_t u) { return z(u2f(u)); }
static uint32_t ftz_bits(float f) { return f2u(z(f)); }

/* ---- samples (SPEC 4) ---- */
static void samples(float *xs, float *ys) {
  float h = zdiv(2.0f, zfrom_u32(255));
  for (uint32_t i = 0; i < SAMPLES; i++) {
    float x = zadd(-1.0f, zmul(zfrom_u32(i), h));
    xs[i] = x;
#ifdef FAULT_SIN_F32
    ys[i] = sinf((float)M_PI * x); /* the float sine of the product: not correctly rounded, no exact zeros */
#else
    double ax = fabs((double)x), r = ax > 0.5 ? 1.0 - ax : ax; /* exact reduction: sin(pi x) = sin(pi (1-|x|)) */
    float s = (float)sin(M_PI * r);
    ys[i] = x < 0 ? -s : s;
#endif
  }
}

/* ---- step_sums, apply, loss (SPEC 5, 6) ---- */
static void step_sums(const float p[4], const float *xs, const float *ys, uint32_t off, float sums[5]) {
  uint32_t g = off % 8;
  float v[WARP][5], w[WARP][5];
  for (int l = 0; l < WARP; l++) {
    float x = xs[g + 8 * l], y = ys[g + 8 * l];
    float x2 = zmul(x, x), x3 = zmul(x2, x);
#ifdef FAULT_EXPR_FLUSH
    /* a flush per statement, each Horner step one expression: with FMA and -ffp-contract=fast gcc fuses them */
    float pred = z(z(z(p[3] * x + p[2]) * x + p[1]) * x + p[0]);
#else
    float pred = zadd(zmul(zadd(zmul(zadd(zmul(p[3], x), p[2]), x), p[1]), x), p[0]);
#endif
    float e = zsub(pred, y);
    v[l][0] = e; v[l][1] = zmul(e, x); v[l][2] = zmul(e, x2); v[l][3] = zmul(e, x3); v[l][4] = zmul(e, e);
  }
#ifdef FAULT_XOR_ORDER
  for (int o = 1; o <= 16; o <<= 1) { /* the butterfly's rounds from the nearest lane out */
#else
  for (int o = 16; o >= 1; o >>= 1) {
#endif
    for (int l = 0; l < WARP; l++)
      for (int j = 0; j < 5; j++) w[l][j] = zadd(v[l][j], v[l ^ o][j]);
    memcpy(v, w, sizeof v);
  }
  for (int j = 0; j < 5; j++) sums[j] = v[0][j];
}

static void apply(float p[4], const float sums[5], float lr, float inv) {
  for (int j = 0; j < 4; j++)
#ifdef FAULT_APPLY_REGROUPED
    p[j] = zsub(p[j], zmul(zmul(lr, sums[j]), inv)); /* (lr * g) * inv */
#else
    p[j] = zsub(p[j], zmul(lr, zmul(sums[j], inv)));
#endif
}

static float loss(const float sums[5], float inv) { return zmul(sums[4], inv); }

/* ---- the exchange page (SPEC 9): in memory, members are threads; a timeout only where injected ---- */
static uint32_t n_sys = 1;
static bool grouped = false;
static uint64_t ex_counter[64];
static uint32_t ex_slot[64][2][SLOT_WORDS];
static pthread_mutex_t ex_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ex_cv = PTHREAD_COND_INITIALIZER;
static int n_inject;
static uint32_t inject_k[64];
static uint64_t inject_round[64];
static bool inject_done[64];

static void ex_set_slot(uint32_t k, uint32_t par, const uint32_t w[SLOT_WORDS]) {
  pthread_mutex_lock(&ex_mu);
  memcpy(ex_slot[k][par], w, sizeof ex_slot[k][par]);
  pthread_mutex_unlock(&ex_mu);
}
static bool ex_round(uint32_t k, uint64_t n) {
  pthread_mutex_lock(&ex_mu);
  ex_counter[k] = n;
  pthread_cond_broadcast(&ex_cv);
  for (int i = 0; i < n_inject; i++)
    if (!inject_done[i] && inject_k[i] == k && inject_round[i] == n) {
      inject_done[i] = true;
      pthread_mutex_unlock(&ex_mu);
      return false;
    }
  for (;;) {
    bool all = true;
    for (uint32_t m = 0; m < n_sys; m++) all = all && ex_counter[m] >= n;
    if (all) break;
    pthread_cond_wait(&ex_cv, &ex_mu);
  }
  pthread_mutex_unlock(&ex_mu);
  return true;
}
static void ex_get_slot(uint32_t m, uint32_t par, uint32_t w[SLOT_WORDS]) {
  pthread_mutex_lock(&ex_mu);
  memcpy(w, ex_slot[m][par], sizeof ex_slot[m][par]);
  pthread_mutex_unlock(&ex_mu);
}

/* ---- the program (SPEC 8, the seed's init, exchange, run, task) ---- */
typedef struct {
  uint8_t view[VIEW_BYTES];
  uint32_t k;
  float xs[SAMPLES], ys[SAMPLES];
  uint32_t *trace; /* system 0: the applied sums, 5 words a step */
  uint64_t traced;
} sys_t;

static void init(sys_t *s) {
  memset(s->view, 0, VIEW_BYTES);
  samples(s->xs, s->ys);
  for (int i = 0; i < SAMPLES; i++) {
    set_u32(s->view, T_X + 4 * i, f2u(s->xs[i]));
    set_u32(s->view, T_Y + 4 * i, f2u(s->ys[i]));
  }
  set_u32(s->view, T_LR, 0x3F000000u);
  set_u32(s->view, T_STEPS_PER_TASK, 64);
  set_u32(s->view, T_INV_BATCH, f2u(zdiv(1.0f, zfrom_u32(32 * n_sys))));
}

static bool exchange(uint32_t k, uint64_t n, const float own[5], bool resuming, float out[5]) {
  uint32_t par = (uint32_t)(n % 2), s[SLOT_WORDS] = {0};
  if (!resuming) {
    for (int j = 0; j < 5; j++) s[j] = ftz_bits(own[j]);
    ex_set_slot(k, par, s);
  }
  if (!ex_round(k, n)) return false;
  ex_get_slot(0, par, s);
  for (int j = 0; j < 5; j++) out[j] = ftz_from_bits(s[j]);
  for (uint32_t m = 1; m < n_sys; m++) {
    ex_get_slot(m, par, s);
    for (int j = 0; j < 5; j++) out[j] = zadd(out[j], ftz_from_bits(s[j]));
  }
  return true;
}

static uint32_t run(sys_t *s, uint32_t arg) {
  uint8_t *v = s->view;
  uint64_t base = (uint64_t)get_u32(v, T_STEP_HI) << 32 | arg;
  float p[4];
  for (int j = 0; j < 4; j++) p[j] = ftz_from_bits(get_u32(v, T_PARAMS + 4 * j));
  float lr = ftz_from_bits(get_u32(v, T_LR));
#ifdef FAULT_INV_RECOMPUTED
  float inv = zdiv(1.0f, zfrom_u32(32 * n_sys)); /* "it is a constant of the cluster": not read from the page */
#else
  float inv = ftz_from_bits(get_u32(v, T_INV_BATCH));
#endif
  uint32_t steps = get_u32(v, T_STEPS_PER_TASK), pending = get_u32(v, T_PENDING), round = get_u32(v, T_ROUND);
  for (int i = 0; i < SAMPLES; i++) {
    s->xs[i] = u2f(get_u32(v, T_X + 4 * i));
    s->ys[i] = u2f(get_u32(v, T_Y + 4 * i));
  }
  bool resume = grouped && pending != 0 && round == arg + 1u;
  if (!resume && pending != 0) set_u32(v, T_PENDING, 0);
  uint32_t done = 0;
  bool timed_out = false;
  while (done < steps) {
    uint64_t t64 = base + done;
    uint32_t t = (uint32_t)t64;
    float sums[5] = {0, 0, 0, 0, 0};
    bool resuming = resume;
    resume = false;
#ifdef FAULT_BATCH_OFFSET
    if (!resuming) step_sums(p, s->xs, s->ys, t * n_sys, sums); /* "the batch of step t": the member's + k dropped */
#else
    if (!resuming) step_sums(p, s->xs, s->ys, t * n_sys + s->k, sums);
#endif
    if (grouped) {
      float total[5];
      if (!exchange(s->k, t64 + 1, sums, resuming, total)) {
        timed_out = true;
        break;
      }
      memcpy(sums, total, sizeof sums);
    }
    if (s->trace) {
      for (int j = 0; j < 5; j++) s->trace[5 * s->traced + j] = f2u(sums[j]);
      s->traced++;
    }
    apply(p, sums, lr, inv);
#ifdef FAULT_LOSS_INDEX
    set_u32(v, T_LOSS + 4 * ((t + 1) % 256), f2u(loss(sums, inv))); /* the ring indexed by the step's round */
#else
    set_u32(v, T_LOSS + 4 * (t % 256), f2u(loss(sums, inv)));
#endif
    done++;
  }
  for (int j = 0; j < 4; j++) set_u32(v, T_PARAMS + 4 * j, f2u(p[j]));
  if (timed_out) {
    set_u32(v, T_ROUND, arg + done + 1u);
    set_u32(v, T_PENDING, 1);
  } else if (grouped) {
    set_u32(v, T_PENDING, 0);
  }
  set_u32(v, T_ERR, timed_out);
#ifdef FAULT_STEP_HI_NO_CARRY
  uint32_t next = arg + done; /* the step counter kept in 32 bits: STEP_HI never moves */
  set_u32(v, T_NEXT_STEP, next);
#else
  uint64_t next = base + done;
  set_u32(v, T_STEP_HI, (uint32_t)(next >> 32));
  set_u32(v, T_NEXT_STEP, (uint32_t)next);
#endif
  return done;
}

static void set_lr(sys_t *s, uint32_t word) { set_u32(s->view, T_LR, ftz_bits(ftz_from_bits(word))); }

/* ---- the host (SPEC 10, case.json's host) ---- */
static uint64_t h_steps, h_base;
static uint32_t h_spt;
static int h_init, n_lr;
static uint64_t lr_before[64];
static uint32_t lr_word[64];

static void *system_main(void *arg) {
  sys_t *s = arg;
#ifdef FAULT_MXCSR
  _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) and DAZ (bit 6) */
#endif
  if (h_init) {
    init(s);
    set_u32(s->view, T_STEP_HI, (uint32_t)(h_base >> 32));
    set_u32(s->view, T_NEXT_STEP, (uint32_t)h_base);
    set_u32(s->view, T_STEPS_PER_TASK, h_spt);
  }
  uint64_t done = 0;
  for (;;) {
    for (int i = 0; i < n_lr; i++)
      if (lr_before[i] == done) set_lr(s, lr_word[i]);
    if (done == h_steps) break;
    uint64_t stop = h_steps;
    for (int i = 0; i < n_lr; i++)
      if (lr_before[i] > done && lr_before[i] < stop) stop = lr_before[i];
    uint32_t spt = get_u32(s->view, T_STEPS_PER_TASK);
    uint64_t count = stop - done < spt ? stop - done : spt;
    if (count != spt) set_u32(s->view, T_STEPS_PER_TASK, (uint32_t)count);
    done += run(s, get_u32(s->view, T_NEXT_STEP));
    if (count != spt) set_u32(s->view, T_STEPS_PER_TASK, spt);
  }
  return NULL;
}

static void die(const char *what, const char *path) {
  fprintf(stderr, "train_port: %s %s\n", what, path);
  exit(3);
}

int main(int argc, char **argv) {
  if (argc < 8) die("usage:", "N GROUP STEPS SPT BASE INIT OUT_DIR IN_0.. [BEFORE:WORD ...]");
  n_sys = (uint32_t)strtoul(argv[1], NULL, 10);
  grouped = atoi(argv[2]) != 0;
  h_steps = strtoull(argv[3], NULL, 10);
  h_spt = (uint32_t)strtoul(argv[4], NULL, 10);
  h_base = strtoull(argv[5], NULL, 10);
  h_init = atoi(argv[6]);
  const char *out = argv[7];
  if (n_sys < 1 || n_sys > 64 || argc < 8 + (int)n_sys) die("bad system count", argv[1]);
  for (int i = 8 + (int)n_sys; i < argc; i++) {
    if (argv[i][0] == 'T') {
      if (n_inject == 64 || sscanf(argv[i], "T:%u:%lu", &inject_k[n_inject], &inject_round[n_inject]) != 2)
        die("bad timeout", argv[i]);
      n_inject++;
    } else if (n_lr == 64 || sscanf(argv[i], "%lu:%x", &lr_before[n_lr], &lr_word[n_lr]) != 2) {
      die("bad SET_LR", argv[i]);
    } else {
      n_lr++;
    }
  }
  sys_t *sys = calloc(n_sys, sizeof *sys);
  pthread_t th[64];
  for (uint32_t k = 0; k < n_sys; k++) {
    sys[k].k = k;
    FILE *f = fopen(argv[8 + k], "rb");
    if (!f || fread(sys[k].view, 1, VIEW_BYTES, f) != VIEW_BYTES) die("cannot read", argv[8 + k]);
    fclose(f);
  }
  sys[0].trace = malloc(sizeof(uint32_t) * 5 * (h_steps + 1));
  for (uint32_t k = 0; k < n_sys; k++) pthread_create(&th[k], NULL, system_main, &sys[k]);
  for (uint32_t k = 0; k < n_sys; k++) pthread_join(th[k], NULL);
  char path[4096];
  for (uint32_t k = 0; k < n_sys; k++) {
    snprintf(path, sizeof path, "%s/out-%u.page", out, k);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(sys[k].view, 1, VIEW_BYTES, f) != VIEW_BYTES || fclose(f)) die("cannot write", path);
  }
  snprintf(path, sizeof path, "%s/trace.bin", out);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(sys[0].trace, 4, 5 * sys[0].traced, f) != 5 * sys[0].traced || fclose(f)) die("cannot write", path);
  return 0;
}
