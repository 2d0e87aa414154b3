/* runtime/unit.c -- compile units and the JIT's kernel compiles (see
 * moegen_unit in moegen/runtime.h and runtime/shared.h). */
#include "shared.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "sha256.h"

const char *moegen_unit_name(moegen_unit u) {
  static const char *const names[MOEGEN_UNIT_COUNT] = {"router", "router_train", "permute", "gemm",
                                                         "gemm_train", "quant"};
  return (unsigned)u < MOEGEN_UNIT_COUNT ? names[u] : "?";
}

void moegen_compile_head(char buf[MOEGEN_COMPILE_HEAD_MAX], moegen_unit u, int kernel) {
  if (kernel >= 0)
    snprintf(buf, MOEGEN_COMPILE_HEAD_MAX, "#define MOEGEN_UNIT %d\n#define MOEGEN_KERNEL %d\n#line 1\n",
             (int)u, kernel);
  else
    snprintf(buf, MOEGEN_COMPILE_HEAD_MAX, "#define MOEGEN_UNIT %d\n#line 1\n", (int)u);
}

char *moegen_unit_source(const char *source, size_t source_size, moegen_unit u, size_t *size) {
  char head[MOEGEN_COMPILE_HEAD_MAX];
  moegen_compile_head(head, u, -1);
  size_t n = strlen(head);
  char *text = malloc(n + source_size + 1);
  if (!text) return NULL;
  memcpy(text, head, n);
  memcpy(text + n, source, source_size);
  text[n + source_size] = 0;
  *size = n + source_size;
  return text;
}

void moegen_jit_source_init(moegen_jit_source *s, const char *name, const char *arch,
                            const char *text, size_t size) {
  s->name = name;
  s->arch = arch;
  s->text = text;
  s->size = size;
  moegen_sha256_of(text, size, s->sha256);
}

/* Threads for n compile jobs: $MOEGEN_JIT_THREADS (>= 1) if set, else the
 * CPUs this thread may run on; at most n. */
static size_t job_threads(size_t n) {
  const char *e = getenv("MOEGEN_JIT_THREADS");
  long want = e && *e ? strtol(e, NULL, 10) : 0;
  if (want < 1) {
    cpu_set_t set;
    want = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  return (size_t)want < n ? (size_t)want : n;
}

/* The jobs of one run and the next one to take. */
typedef struct job_queue {
  const moegen_jit_source *src;
  moegen_kernel_job *jobs;
  size_t n;
  atomic_size_t next;
  moegen_cache_banner banner[MOEGEN_UNIT_COUNT]; /* one progress line per unit */
  char banner_name[MOEGEN_UNIT_COUNT][160];
} job_queue;

/* Compiles one job through the cache. */
static void run_job(job_queue *q, moegen_kernel_job *j) {
  char head[MOEGEN_COMPILE_HEAD_MAX], name[256];
  moegen_compile_head(head, j->unit, j->kernel);
  snprintf(name, sizeof name, "%s (%s unit: %s)", q->src->name, moegen_unit_name(j->unit),
           j->kernel_name);
  moegen_cache_source cs = {head, q->src->text, q->src->size, q->src->sha256};
  j->st = moegen_cache_compile(&cs, name, q->src->arch, &q->banner[j->unit], &j->cubin,
                               &j->cubin_size, &j->log, &j->outcome);
}

static void *worker(void *arg) {
  job_queue *q = arg;
  for (size_t i; (i = atomic_fetch_add(&q->next, 1)) < q->n;) run_job(q, &q->jobs[i]);
  return NULL;
}

moegen_status moegen_kernel_jobs_run(const moegen_jit_source *src, moegen_kernel_job *jobs,
                                     size_t n) {
  job_queue q = {.src = src, .jobs = jobs, .n = n};
  atomic_init(&q.next, 0);
  for (int u = 0; u < MOEGEN_UNIT_COUNT; u++) {
    atomic_flag_clear(&q.banner[u].told);
    snprintf(q.banner_name[u], sizeof q.banner_name[u], "%s (%s unit)", src->name,
             moegen_unit_name((moegen_unit)u));
    q.banner[u].name = q.banner_name[u];
  }
  for (size_t i = 0; i < n; i++) {
    jobs[i].cubin = NULL;
    jobs[i].cubin_size = 0;
    jobs[i].log = NULL;
    jobs[i].st = (unsigned)jobs[i].unit < MOEGEN_UNIT_COUNT ? MOEGEN_OK : MOEGEN_ERR_INVALID_ARGUMENT;
    if (jobs[i].st != MOEGEN_OK) return jobs[i].st;
  }
  size_t want = job_threads(n), started = 0;
  pthread_t threads[64];
  if (want > sizeof threads / sizeof threads[0]) want = sizeof threads / sizeof threads[0];
  while (started + 1 < want && pthread_create(&threads[started], NULL, worker, &q) == 0)
    started++;
  worker(&q); /* this thread works too (alone when no thread could be started) */
  for (size_t t = 0; t < started; t++) pthread_join(threads[t], NULL);
  for (size_t i = 0; i < n; i++)
    if (jobs[i].st != MOEGEN_OK) return jobs[i].st;
  return MOEGEN_OK;
}
