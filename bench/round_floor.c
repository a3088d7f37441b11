/* The C floor of a lockstep round (issue 35): the exchange page's counters and fold in memory, no step.
 *
 * N members (threads of one process, or processes sharing an anonymous MAP_SHARED page) run R
 * rounds each: write their 5 sums into the slot of the round's parity, publish their counter
 * (a release store), wait until every counter has reached the round (acquire loads), then fold
 * the N slots left to right in system order (float32 adds, as SPEC 9 does) and fold the result's
 * bits into their digest: sum over rounds r of (r + 1) * (word j of the fold) * (j + 1), mod 2^64.
 * A member's sums for round r are float32((k + 1) * (j + 1) + (r & 255)) / 8 (exact), so the
 * digest is known in numpy (bench/round_floor.py checks every member's before it times anything).
 * The page is laid out as meshnb's (a system's counter and slots on its own 128 bytes).
 *
 * Waiting policies: spin (the pause hint only), yield (8 pauses, then sched_yield: meshnb's
 * portable policy), futex (pause while the wait is shorter than a bound learnt from the recent
 * rounds, 1-50 us, then sleep on the awaited counter's low half, announced in that system's
 * waiter count, which its publisher reads after a fence to wake only when someone sleeps:
 * meshnb's Linux policy, meshnb.loops.grouped).
 *
 * Usage: round_floor N ROUNDS spin|yield|futex threads|processes
 * Prints one line: the round loop's wall nanoseconds (from a start every member waits for), then
 * every member's digest in hex.  Build: gcc -O2 -pthread. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { SPIN, YIELD, FUTEX };
enum { MAXN = 64, SYS_BYTES = 128 };

typedef struct {
    _Alignas(64) _Atomic uint64_t counter; /* the system's block: counter, two slots, waiters */
    uint32_t slot[2][8];
    _Atomic uint32_t waiters;
    char pad[SYS_BYTES - 8 - 64 - 4];
} System;

typedef struct {
    _Atomic uint32_t go;
    _Atomic uint32_t ready;
    uint64_t t0, t1;
    uint64_t digest[MAXN];
    System sys[MAXN];
} Page;

static Page *page;
static int n, policy, shared;
static uint64_t rounds;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float flt(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static int op(int o) { return shared ? o : (o | FUTEX_PRIVATE_FLAG); }

static void sleep_on(int m, uint64_t rnd) {
    System *s = &page->sys[m];
    atomic_fetch_add(&s->waiters, 1); /* seq_cst: announced before the counter is read again */
    uint64_t c = atomic_load_explicit(&s->counter, memory_order_acquire);
    if (c < rnd) {
        struct timespec ts = {0, 1000000}; /* 1 ms: bounded, as meshnb's */
        syscall(SYS_futex, (uint32_t *)&s->counter, op(FUTEX_WAIT), (uint32_t)c, &ts, NULL, 0);
    }
    atomic_fetch_sub(&s->waiters, 1);
}

static void wait_round(uint64_t rnd, int64_t *budget) {
    uint64_t t0 = 0;
    for (int m = 0; m < n; m++) {
        unsigned spins = 0;
        while (atomic_load_explicit(&page->sys[m].counter, memory_order_acquire) < rnd) {
            spins++;
            if (policy == SPIN || (policy == YIELD && spins <= 8)) {
                _mm_pause();
            } else if (policy == YIELD) {
                sched_yield();
            } else { /* FUTEX */
                if (!t0) t0 = now_ns();
                if (spins % 16) { _mm_pause(); continue; }
                if ((int64_t)(now_ns() - t0) >= *budget) sleep_on(m, rnd);
            }
        }
    }
    if (policy == FUTEX) { /* the learnt bound, as meshnb.loops.grouped._learn */
        int64_t w = t0 ? (int64_t)(now_ns() - t0) : 0, target;
        if (w <= *budget) target = 4 * w;
        else if (w < 50000) target = 2 * w;
        else target = 1000;
        int64_t b = (3 * *budget + target) >> 2;
        *budget = b < 1000 ? 1000 : b > 50000 ? 50000 : b;
    }
}

static void member(int k) {
    System *me = &page->sys[k];
    int64_t budget = 20000;
    uint64_t digest = 0;
    atomic_fetch_add(&page->ready, 1);
    while (!atomic_load_explicit(&page->go, memory_order_acquire)) _mm_pause();
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t rnd = r + 1;
        int par = (int)(rnd & 1);
        for (int j = 0; j < 5; j++) me->slot[par][j] = bits((float)((k + 1) * (j + 1) + (int)(r & 255)) / 8.0f);
        atomic_store_explicit(&me->counter, rnd, memory_order_release);
        if (policy == FUTEX) {
            atomic_thread_fence(memory_order_seq_cst);
            if (atomic_load_explicit(&me->waiters, memory_order_relaxed))
                syscall(SYS_futex, (uint32_t *)&me->counter, op(FUTEX_WAKE), 0x7FFFFFFF, NULL, NULL, 0);
        }
        wait_round(rnd, &budget);
        for (int j = 0; j < 5; j++) {
            float f = flt(page->sys[0].slot[par][j]);
            for (int m = 1; m < n; m++) f += flt(page->sys[m].slot[par][j]);
            digest += rnd * (uint64_t)(j + 1) * bits(f);
        }
    }
    page->digest[k] = digest;
}

static void *thread_main(void *arg) {
    member((int)(intptr_t)arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: round_floor N ROUNDS spin|yield|futex threads|processes\n");
        return 2;
    }
    n = atoi(argv[1]);
    rounds = strtoull(argv[2], NULL, 10);
    policy = !strcmp(argv[3], "spin") ? SPIN : !strcmp(argv[3], "yield") ? YIELD : !strcmp(argv[3], "futex") ? FUTEX : -1;
    shared = !strcmp(argv[4], "processes");
    if (n < 1 || n > MAXN || policy < 0 || (!shared && strcmp(argv[4], "threads"))) {
        fprintf(stderr, "round_floor: N in 1..64, a policy of spin, yield, futex, and threads or processes\n");
        return 2;
    }
    page = mmap(NULL, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 1;
    pthread_t th[MAXN];
    pid_t pid[MAXN];
    for (int k = 0; k < n; k++) {
        if (shared) {
            pid[k] = fork();
            if (pid[k] == 0) { member(k); _exit(0); }
        } else {
            pthread_create(&th[k], NULL, thread_main, (void *)(intptr_t)k);
        }
    }
    while (atomic_load(&page->ready) < (uint32_t)n) sched_yield();
    page->t0 = now_ns();
    atomic_store(&page->go, 1);
    for (int k = 0; k < n; k++) {
        if (shared) waitpid(pid[k], NULL, 0);
        else pthread_join(th[k], NULL);
    }
    page->t1 = now_ns();
    printf("%llu", (unsigned long long)(page->t1 - page->t0));
    for (int k = 0; k < n; k++) printf(" %016llx", (unsigned long long)page->digest[k]);
    printf("\n");
    return 0;
}
