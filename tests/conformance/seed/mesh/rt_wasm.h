/* The runtime (contexts, views, the exchange page: SPEC 8, 9) and a host (SPEC 10) for meshnb's tests,
 * written from SPEC.md: MESH_PROGRAM(init, task) makes the program a native executor for
 * `meshnb check PACK --exec` (through seed_executor.py, which passes the case on the command line).
 *
 * usage: PROG N GROUP STEPS SPT BASE INIT OUT_DIR IN_0 .. IN_{N-1} [BEFORE:WORD | call:BEFORE:OP:ARG | T:K:ROUND ...]
 *   as tests/conformance/executors/train_port.c, plus `call` entries: task(OP, ARG) made on every system when
 *   BEFORE steps are done (before a SET_LR there); each must return R_BAD_OP. Members run as threads; a round
 *   waits at most MESH_ROUND_WAIT_MS and then times out (the host retries a timed-out TASK a few times);
 *   T:K:ROUND makes system K's round ROUND (decimal) time out once, injected: the counter published, then false. */
#ifndef MESH_RT_WASM_H
#define MESH_RT_WASM_H
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/abi/view_train.h"
#include "mesh/ref/cubic.h"

#ifndef MESH_ROUND_WAIT_MS
#define MESH_ROUND_WAIT_MS 2000
#endif
#define MESH_MAX_SYSTEMS 64

typedef uint8_t *mesh_view;
typedef struct {
  uint64_t counter[MESH_MAX_SYSTEMS];
  uint32_t slot[MESH_MAX_SYSTEMS][2][MESH_EX_SLOT_WORDS];
  uint32_t n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} mesh__page;
typedef struct {
  mesh__page *page;
  uint32_t self;
} mesh_exchange;
static int mesh__ninject;
static uint32_t mesh__inject_k[64];
static uint64_t mesh__inject_round[64];
static bool mesh__inject_done[64];
typedef struct {
  uint8_t view[MESH_VIEW_BYTES];
  uint32_t k, n;
  bool group;
  mesh__page *ex;
  uint64_t counters[3];
} mesh_ctx;

static inline mesh_view mesh_ctx_view(const mesh_ctx *ctx) { return (mesh_view)ctx->view; }
static inline bool mesh_ctx_group(const mesh_ctx *ctx, uint32_t *k, uint32_t *n) {
  if (!ctx->group) return false;
  *k = ctx->k, *n = ctx->n;
  return true;
}
static inline bool mesh_ctx_exchange(const mesh_ctx *ctx, mesh_exchange *x) {
  if (!ctx->group || !ctx->ex) return false;
  x->page = ctx->ex, x->self = ctx->k;
  return true;
}
static inline void mesh_ctx_count(const mesh_ctx *ctx, uint32_t which, uint64_t by) {
  ((mesh_ctx *)ctx)->counters[which] += by;
}
static inline uint32_t mesh_view_u32(mesh_view v, uint32_t off) { uint32_t u; memcpy(&u, v + off, 4); return u; }
static inline void mesh_view_set_u32(mesh_view v, uint32_t off, uint32_t u) { memcpy(v + off, &u, 4); }
static inline void mesh_view_set_f32(mesh_view v, uint32_t off, float f) { memcpy(v + off, &f, 4); }
static inline void mesh_view_read_u32s(mesh_view v, uint32_t off, uint32_t *out, uint32_t n) { memcpy(out, v + off, 4 * n); }
static inline void mesh_view_read_f32s(mesh_view v, uint32_t off, float *out, uint32_t n) { memcpy(out, v + off, 4 * n); }
static inline void mesh_view_write_f32s(mesh_view v, uint32_t off, const float *in, uint32_t n) { memcpy(v + off, in, 4 * n); }
static inline void mesh_ctx_set_f32(const mesh_ctx *ctx, uint32_t off, float f) { memcpy(((mesh_ctx *)ctx)->view + off, &f, 4); }

static inline void mesh_exchange_set_slot(mesh_exchange ex, uint32_t k, uint32_t par, const uint32_t w[MESH_EX_SLOT_WORDS]) {
  pthread_mutex_lock(&ex.page->mu);
  memcpy(ex.page->slot[k % MESH_MAX_SYSTEMS][par & 1], w, sizeof ex.page->slot[0][0]);
  pthread_mutex_unlock(&ex.page->mu);
}
static inline void mesh_exchange_slot(mesh_exchange ex, uint32_t m, uint32_t par, uint32_t w[MESH_EX_SLOT_WORDS]) {
  pthread_mutex_lock(&ex.page->mu);
  memcpy(w, ex.page->slot[m % MESH_MAX_SYSTEMS][par & 1], sizeof ex.page->slot[0][0]);
  pthread_mutex_unlock(&ex.page->mu);
}
/* Publish this system's counter = n, wait (bounded) until every system's is >= n. */
static inline bool mesh_exchange_round(mesh_exchange ex, uint64_t n) {
  mesh__page *pg = ex.page;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += MESH_ROUND_WAIT_MS / 1000;
  until.tv_nsec += (MESH_ROUND_WAIT_MS % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&pg->mu);
  pg->counter[ex.self] = n;
  pthread_cond_broadcast(&pg->cv);
  for (int i = 0; i < mesh__ninject; i++)
    if (!mesh__inject_done[i] && mesh__inject_k[i] == ex.self && mesh__inject_round[i] == n) {
      mesh__inject_done[i] = true;
      pthread_mutex_unlock(&pg->mu);
      return false;
    }
  bool ok = true;
  for (;;) {
    bool all = true;
    for (uint32_t m = 0; m < pg->n; m++) all = all && pg->counter[m] >= n;
    if (all) break;
    if (pthread_cond_timedwait(&pg->cv, &pg->mu, &until) == ETIMEDOUT) {
      ok = false;
      break;
    }
  }
  pthread_mutex_unlock(&pg->mu);
  return ok;
}

/* ---- the host ---- */
typedef struct {
  uint64_t before;
  uint32_t op, arg;
} mesh__call;
static uint64_t mesh__steps, mesh__base;
static uint32_t mesh__spt;
static int mesh__init, mesh__ncalls;
static mesh__call mesh__calls[512];
static void (*mesh__init_fn)(const mesh_ctx *);
static uint32_t (*mesh__task_fn)(const mesh_ctx *, uint32_t, uint32_t);
static uint32_t *mesh__trace0;
static uint64_t mesh__traced0;

static void mesh__die(const char *what, const char *detail) {
  fprintf(stderr, "seed executor: %s %s\n", what, detail);
  exit(3);
}

static void *mesh__system(void *arg) {
  mesh_ctx *ctx = arg;
  if (ctx->k == 0) mesh__trace = mesh__trace0, mesh__trace_cap = mesh__steps + 1;
  if (mesh__init) {
    mesh__init_fn(ctx);
    mesh_view_set_u32(ctx->view, MESH_TRAIN_T_STEP_HI, (uint32_t)(mesh__base >> 32));
    mesh_view_set_u32(ctx->view, MESH_TRAIN_T_NEXT_STEP, (uint32_t)mesh__base);
    mesh_view_set_u32(ctx->view, MESH_TRAIN_T_STEPS_PER_TASK, mesh__spt);
  }
  uint64_t done = 0;
  int timeouts = 0;
  char msg[128];
  for (;;) {
    for (int i = 0; i < mesh__ncalls; i++) {
      if (mesh__calls[i].before != done) continue;
      uint32_t r = mesh__task_fn(ctx, mesh__calls[i].op, mesh__calls[i].arg);
      if (mesh__calls[i].op != MESH_TRAIN_OP_SET_LR && r != MESH_R_BAD_OP) {
        snprintf(msg, sizeof msg, "%08x returned %08x, not R_BAD_OP", mesh__calls[i].op, r);
        mesh__die("task op", msg);
      }
      if (mesh__calls[i].op == MESH_TRAIN_OP_SET_LR && r != MESH_R_NONE) {
        snprintf(msg, sizeof msg, "returned %08x, not R_NONE", r);
        mesh__die("SET_LR", msg);
      }
    }
    if (done == mesh__steps) break;
    uint64_t stop = mesh__steps;
    for (int i = 0; i < mesh__ncalls; i++)
      if (mesh__calls[i].before > done && mesh__calls[i].before < stop) stop = mesh__calls[i].before;
    uint32_t spt = mesh_view_u32(ctx->view, MESH_TRAIN_T_STEPS_PER_TASK);
    if (spt == 0) mesh__die("a page with STEPS_PER_TASK 0", "(refused)");
    uint64_t count = stop - done < spt ? stop - done : spt;
    if (count != spt) mesh_view_set_u32(ctx->view, MESH_TRAIN_T_STEPS_PER_TASK, (uint32_t)count);
    uint32_t r = mesh__task_fn(ctx, MESH_OP_TASK, mesh_view_u32(ctx->view, MESH_TRAIN_T_NEXT_STEP));
    if (count != spt) mesh_view_set_u32(ctx->view, MESH_TRAIN_T_STEPS_PER_TASK, spt);
    if (r > count) {
      snprintf(msg, sizeof msg, "returned %" PRIu32 " steps of a task of %" PRIu64, r, count);
      mesh__die("TASK", msg);
    }
    done += r;
    if (mesh_view_u32(ctx->view, MESH_TRAIN_T_ERR)) {
      if (++timeouts > 3) mesh__die("TASK", "timed out 4 times in a row");
    } else if (r != count) {
      snprintf(msg, sizeof msg, "did %" PRIu32 " of %" PRIu64 " steps without a timeout", r, count);
      mesh__die("TASK", msg);
    } else {
      timeouts = 0;
    }
  }
  if (ctx->k == 0) mesh__traced0 = mesh__traced;
  return NULL;
}

static int mesh__main(int argc, char **argv) {
  if (argc < 8) mesh__die("usage:", "N GROUP STEPS SPT BASE INIT OUT_DIR IN_0.. [BEFORE:WORD | call:BEFORE:OP:ARG ...]");
  uint32_t n = (uint32_t)strtoul(argv[1], NULL, 10);
  bool group = atoi(argv[2]) != 0;
  mesh__steps = strtoull(argv[3], NULL, 10);
  mesh__spt = (uint32_t)strtoul(argv[4], NULL, 10);
  mesh__base = strtoull(argv[5], NULL, 10);
  mesh__init = atoi(argv[6]);
  const char *out = argv[7];
  if (n < 1 || n > MESH_MAX_SYSTEMS || argc < 8 + (int)n) mesh__die("bad system count", argv[1]);
  for (int i = 8 + (int)n; i < argc && mesh__ncalls < 512; i++, mesh__ncalls++) {
    if (argv[i][0] == 'T') {
      if (mesh__ninject == 64 ||
          sscanf(argv[i], "T:%" SCNu32 ":%" SCNu64, &mesh__inject_k[mesh__ninject], &mesh__inject_round[mesh__ninject]) != 2)
        mesh__die("bad timeout", argv[i]);
      mesh__ninject++, mesh__ncalls--;
      continue;
    }
    mesh__call *c = &mesh__calls[mesh__ncalls];
    if (sscanf(argv[i], "call:%" SCNu64 ":%" SCNx32 ":%" SCNx32, &c->before, &c->op, &c->arg) == 3) continue;
    c->op = MESH_TRAIN_OP_SET_LR;
    if (sscanf(argv[i], "%" SCNu64 ":%" SCNx32, &c->before, &c->arg) != 2) mesh__die("bad call", argv[i]);
  }
  static mesh__page page;
  page.n = n;
  pthread_mutex_init(&page.mu, NULL);
  pthread_cond_init(&page.cv, NULL);
  mesh_ctx *sys = calloc(n, sizeof *sys);
  pthread_t th[MESH_MAX_SYSTEMS];
  for (uint32_t k = 0; k < n; k++) {
    sys[k].k = k, sys[k].n = n, sys[k].group = group, sys[k].ex = group ? &page : NULL;
    FILE *f = fopen(argv[8 + k], "rb");
    if (!f || fread(sys[k].view, 1, MESH_VIEW_BYTES, f) != MESH_VIEW_BYTES) mesh__die("cannot read", argv[8 + k]);
    fclose(f);
  }
  mesh__trace0 = calloc(5 * (mesh__steps + 1), sizeof(uint32_t));
  for (uint32_t k = 0; k < n; k++) pthread_create(&th[k], NULL, mesh__system, &sys[k]);
  for (uint32_t k = 0; k < n; k++) pthread_join(th[k], NULL);
  char path[4096];
  for (uint32_t k = 0; k < n; k++) {
    snprintf(path, sizeof path, "%s/out-%u.page", out, k);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(sys[k].view, 1, MESH_VIEW_BYTES, f) != MESH_VIEW_BYTES || fclose(f)) mesh__die("cannot write", path);
  }
  snprintf(path, sizeof path, "%s/trace.bin", out);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(mesh__trace0, 20, mesh__traced0, f) != mesh__traced0 || fclose(f)) mesh__die("cannot write", path);
  return 0;
}

#define MESH_PROGRAM(INIT, TASK)                                                                  \
  int main(int argc, char **argv) {                                                               \
    mesh__init_fn = INIT;                                                                         \
    mesh__task_fn = TASK;                                                                         \
    return mesh__main(argc, argv);                                                                \
  }
#endif
