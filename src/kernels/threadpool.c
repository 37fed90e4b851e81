/* threadpool.c — the compute context: a persistent pool of worker threads and the scratch space
 * the ops need.
 *
 * Workers are created once and parked between jobs. A job is published by bumping a generation
 * counter; a parked worker first spins on it (a decode step issues ops microseconds apart, and a
 * futex round trip per op would cost more than the op) and then sleeps on a condition variable so
 * an idle process burns no CPU. The machine this runs on is often oversubscribed, so the spin is
 * short and every spin loop also yields. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/kern_impl.h"
#include "util/mem.h"

/* About 50 microseconds of polling before a worker parks itself. */
#define SPIN_ROUNDS 2000

struct kern_ctx {
    int n_threads;
    pthread_t *threads;
    struct worker_arg *wargs;

    void (*fn)(void *arg, int ith, int nth);
    void *arg;
    _Atomic unsigned generation; /* bumped once per job; workers run a job when it changes */
    _Atomic int pending;         /* workers that have not finished the current job */
    _Atomic int sleepers;        /* workers parked on `wake` */
    _Atomic int caller_waiting;  /* the caller is parked on `done` */
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;

    kern_scratch scratch[KERN_SCRATCH_COUNT]; /* see kern_scratch_get */
};

struct worker_arg {
    kern_ctx *c;
    int ith;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Poll `cond(c)` for a while; true if it became true. */
static bool spin_until(kern_ctx *c, bool (*cond)(kern_ctx *c, unsigned v), unsigned v)
{
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (cond(c, v))
            return true;
        cpu_relax();
        if ((i & 255) == 255)
            sched_yield();
    }
    return cond(c, v);
}

static bool new_job(kern_ctx *c, unsigned seen)
{
    return atomic_load(&c->generation) != seen;
}

static bool job_done(kern_ctx *c, unsigned unused)
{
    (void)unused;
    return atomic_load(&c->pending) == 0;
}

static void *worker_main(void *p)
{
    struct worker_arg *wa = p;
    kern_ctx *c = wa->c;
    unsigned seen = 0;
    for (;;) {
        if (!spin_until(c, new_job, seen)) {
            /* sleepers is raised before the last look at generation, and kern_parallel bumps
             * generation before it reads sleepers (both sequentially consistent), so either the
             * worker sees the job or the caller sees the sleeper and signals under the mutex. */
            pthread_mutex_lock(&c->mu);
            atomic_fetch_add(&c->sleepers, 1);
            while (!new_job(c, seen))
                pthread_cond_wait(&c->wake, &c->mu);
            atomic_fetch_sub(&c->sleepers, 1);
            pthread_mutex_unlock(&c->mu);
        }
        seen = atomic_load(&c->generation);
        if (atomic_load(&c->stop))
            return NULL;
        c->fn(c->arg, wa->ith, c->n_threads);
        if (atomic_fetch_sub(&c->pending, 1) == 1 && atomic_load(&c->caller_waiting)) {
            pthread_mutex_lock(&c->mu);
            pthread_cond_signal(&c->done);
            pthread_mutex_unlock(&c->mu);
        }
    }
}

/* Publish the current fn/arg to the workers. */
static void publish(kern_ctx *c)
{
    atomic_store(&c->pending, c->n_threads - 1);
    atomic_fetch_add(&c->generation, 1);
    if (atomic_load(&c->sleepers) > 0) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->wake);
        pthread_mutex_unlock(&c->mu);
    }
}

static void wait_workers(kern_ctx *c)
{
    if (spin_until(c, job_done, 0))
        return;
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->caller_waiting, 1);
    while (!job_done(c, 0))
        pthread_cond_wait(&c->done, &c->mu);
    atomic_store(&c->caller_waiting, 0);
    pthread_mutex_unlock(&c->mu);
}

void kern_parallel(kern_ctx *c, void (*fn)(void *arg, int ith, int nth), void *arg)
{
    if (c->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    c->fn = fn;
    c->arg = arg;
    publish(c);
    fn(arg, 0, c->n_threads);
    wait_workers(c);
}

static void stop_workers(kern_ctx *c, int started)
{
    atomic_store(&c->stop, 1);
    c->n_threads = started + 1;
    publish(c);
    for (int i = 0; i < started; i++)
        pthread_join(c->threads[i], NULL);
}

kern_ctx *kern_ctx_create(int n_threads)
{
    if (n_threads < 1 || n_threads > KERN_MAX_THREADS)
        return NULL;
    kern_init();
    kern_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->n_threads = n_threads;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->wake, NULL);
    pthread_cond_init(&c->done, NULL);
    int workers = n_threads - 1;
    c->threads = calloc((size_t)workers + 1, sizeof *c->threads);
    c->wargs = calloc((size_t)workers + 1, sizeof *c->wargs);
    if (!c->threads || !c->wargs) {
        kern_ctx_free(c);
        return NULL;
    }
    for (int i = 0; i < workers; i++) {
        c->wargs[i] = (struct worker_arg){c, i + 1};
        if (pthread_create(&c->threads[i], NULL, worker_main, &c->wargs[i]) != 0) {
            stop_workers(c, i);
            c->n_threads = 1;
            kern_ctx_free(c);
            return NULL;
        }
    }
    return c;
}

void kern_ctx_free(kern_ctx *c)
{
    if (!c)
        return;
    if (c->n_threads > 1)
        stop_workers(c, c->n_threads - 1);
    for (size_t i = 0; i < sizeof c->scratch / sizeof c->scratch[0]; i++)
        free(c->scratch[i].ptr);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->mu);
    free(c->threads);
    free(c->wargs);
    free(c);
}

int kern_ctx_threads(const kern_ctx *c)
{
    return c->n_threads;
}

void *kern_scratch_get(kern_ctx *c, int slot, size_t bytes)
{
    kern_scratch *s = &c->scratch[slot];
    if (s->size >= bytes)
        return s->ptr;
    /* Grow geometrically so a model's first few calls settle the size for good. The old buffer
     * goes only once the new one exists: a failed growth leaves what was reserved. */
    size_t size = bytes + bytes / 2;
    void *p;
    if (size < bytes || posix_memalign(&p, 64, size) != 0)
        return NULL;
    free(s->ptr);
    s->ptr = p;
    s->size = size;
    return s->ptr;
}

void kern_scratch_release(kern_ctx *c, int slot, size_t keep)
{
    kern_scratch *s = &c->scratch[slot];
    if (s->size > keep)
        mem_release((char *)s->ptr + keep, s->size - keep);
}
