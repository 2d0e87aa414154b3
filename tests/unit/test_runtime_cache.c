/* tests/unit/test_runtime_cache.c -- runtime/cache.c: cold compile and hit,
 * the progress line, corrupt entries, MOEGEN_CACHE=0, an unusable directory,
 * and the directory fallbacks; the compile lock: four processes compiling
 * the same two sources into one empty cache compile each once, so do four
 * threads of one process compiling one source, a holder
 * killed mid-compile does not hold anyone up, a hung one for at most
 * MOEGEN_CACHE_WAIT seconds, and a lock file that cannot be opened does not
 * stop a compile. Uses its own temporary directory. Exit 77 only when
 * libnvrtc.so.13 cannot be loaded. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "nvrtc.h"
#include "runtime_check.h"

static const char tiny_kernel[] =
    "extern \"C\" __global__ void moegen_router_fwd(float *out, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) out[i] = 3.0f * (float)i;\n"
    "}\n";

/* What the log callback saw. */
typedef struct captured {
  int lines;
  char last[4400], prev[4400]; /* the last line and the one before it */
} captured;

static void capture(const char *line, void *user) {
  captured *c = user;
  c->lines++;
  memcpy(c->prev, c->last, sizeof c->prev);
  snprintf(c->last, sizeof c->last, "%s", line);
}

static captured seen;

/* One cache_compile call and what it did. */
typedef struct outcome {
  moegen_status st;
  moegen_cache_outcome how;
  int lines; /* log lines sent during the call */
  double seconds;
  unsigned char *cubin;
  size_t size;
  char *log;
} outcome;

static outcome compile(const char *source, const char *arch) {
  outcome o;
  int before = seen.lines;
  double t0 = now_seconds();
  o.st = moegen_cache_compile(&(moegen_cache_source){.body = source, .body_size = strlen(source)}, "tiny", arch, NULL, &o.cubin, &o.size, &o.log,
                              &o.how);
  o.seconds = now_seconds() - t0;
  o.lines = seen.lines - before;
  return o;
}

static void release(outcome *o) {
  free(o->cubin);
  free(o->log);
}

/* Counts the files in dir whose names contain `part`; *first gets one of them. */
static int count_files(const char *dir, const char *part, char *first, size_t size) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    if (!strstr(e->d_name, part)) continue;
    if (n++ == 0 && first) snprintf(first, size, "%s/%s", dir, e->d_name);
  }
  if (d) closedir(d);
  return n;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* tiny_kernel with a comment naming tag: a source of its own cache key. */
static void variant(char *buf, size_t size, const char *tag) {
  snprintf(buf, size, "%s// %s\n", tiny_kernel, tag);
}

/* ---------------------------------------------------------------- the compile lock */

enum { PROCS = 4, UNITS = 2 };

/* What one child of `concurrent` saw, per unit: its status, the progress
 * lines it sent (the compiles it made), its cubin's SHA-256. */
typedef struct child_report {
  moegen_status st[UNITS];
  int compiles[UNITS];
  char digest[UNITS][65];
} child_report;

static void count_compiles(const char *line, void *user) {
  if (strncmp(line, "moegen: compiling ", 18) == 0) ++*(int *)user;
}

/* One child: waits until the parent closes `go`, then compiles the units
 * (odd children in reverse order) and writes its report to `out`. */
static void compile_child(int index, const char sources[UNITS][512], int go, int out) {
  int compiles = 0;
  moegen_set_log(count_compiles, &compiles);
  char byte;
  while (read(go, &byte, 1) > 0) {
  }
  child_report r;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < UNITS; i++) {
    int u = index % 2 ? UNITS - 1 - i : i, before = compiles;
    unsigned char *cubin;
    size_t size;
    char *log;
    moegen_cache_outcome how;
    r.st[u] = moegen_cache_compile(&(moegen_cache_source){.body = sources[u], .body_size = strlen(sources[u])}, "tiny", "sm_90a", NULL, &cubin, &size,
                                   &log, &how);
    r.compiles[u] = compiles - before;
    if (r.st[u] == MOEGEN_OK) moegen_sha256_hex(cubin, size, r.digest[u]);
    free(cubin);
    free(log);
  }
  _exit(write(out, &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
}

/* PROCS processes released at once on one empty cache: one compile per
 * unit among them, the same cubin in all, no lock or temporary file left. */
static void concurrent(const char *root) {
  char dir[4096], sources[UNITS][512];
  snprintf(dir, sizeof dir, "%s/concurrent", root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  setenv("MOEGEN_CACHE_WAIT", "60", 1); /* a broken lock fails the test instead of hanging it */
  for (int u = 0; u < UNITS; u++) {
    char tag[32];
    snprintf(tag, sizeof tag, "unit %d", u);
    variant(sources[u], sizeof sources[u], tag);
  }
  int go[2];
  CHECK(pipe(go) == 0, "pipe");
  pid_t pids[PROCS];
  int outs[PROCS];
  fflush(NULL);
  for (int i = 0; i < PROCS; i++) {
    int out[2];
    CHECK(pipe(out) == 0, "pipe");
    pids[i] = fork();
    if (pids[i] == 0) {
      close(go[1]);
      close(out[0]);
      compile_child(i, (const char (*)[512])sources, go[0], out[1]);
    }
    close(out[1]);
    outs[i] = out[0];
  }
  close(go[0]);
  close(go[1]); /* go: every child is waiting on it */
  child_report r[PROCS];
  int compiles[UNITS] = {0};
  for (int i = 0; i < PROCS; i++) {
    int status = -1;
    ssize_t got = read(outs[i], &r[i], sizeof r[i]);
    close(outs[i]);
    waitpid(pids[i], &status, 0);
    CHECK(got == (ssize_t)sizeof r[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "child %d: report %zd bytes, status %d", i, got, status);
    if (got != (ssize_t)sizeof r[i]) continue;
    for (int u = 0; u < UNITS; u++) {
      CHECK(r[i].st[u] == MOEGEN_OK, "child %d unit %d: %s", i, u, moegen_status_string(r[i].st[u]));
      CHECK(strcmp(r[i].digest[u], r[0].digest[u]) == 0, "child %d unit %d: another cubin", i, u);
      compiles[u] += r[i].compiles[u];
    }
  }
  for (int u = 0; u < UNITS; u++)
    CHECK(compiles[u] == 1, "unit %d: %d compiles among %d processes, want 1", u, compiles[u],
          PROCS);
  CHECK(count_files(dir, ".cubin", NULL, 0) == UNITS, "%d entries, want %d",
        count_files(dir, ".cubin", NULL, 0), UNITS);
  CHECK(count_files(dir, ".lock", NULL, 0) == 0, "lock file left in %s", dir);
  CHECK(count_files(dir, ".tmp.", NULL, 0) == 0, "temporary file left in %s", dir);
  unsetenv("MOEGEN_CACHE_WAIT");
}

/* One of the threads of `threads`: waits at the barrier, compiles the source. */
typedef struct thread_job {
  pthread_barrier_t *barrier;
  const char *source;
  moegen_status st;
  unsigned char *cubin;
  size_t size;
} thread_job;

static void *compile_thread(void *arg) {
  thread_job *j = arg;
  char *log;
  moegen_cache_outcome how;
  pthread_barrier_wait(j->barrier);
  j->st = moegen_cache_compile(&(moegen_cache_source){.body = j->source, .body_size = strlen(j->source)}, "tiny", "sm_90a", NULL, &j->cubin, &j->size,
                               &log, &how);
  free(log);
  return NULL;
}

static void count_compiles_atomic(const char *line, void *user) {
  if (strncmp(line, "moegen: compiling ", 18) == 0) atomic_fetch_add((atomic_int *)user, 1);
}

/* PROCS threads of this process (as two modules needing the same unit):
 * one compile, the same cubin, no lock file left. */
static void threads(const char *root) {
  char dir[4096], source[512];
  snprintf(dir, sizeof dir, "%s/threads", root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  setenv("MOEGEN_CACHE_WAIT", "60", 1);
  variant(source, sizeof source, "threads");
  atomic_int compiles = 0;
  moegen_set_log(count_compiles_atomic, &compiles);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, PROCS);
  pthread_t tids[PROCS];
  thread_job jobs[PROCS];
  for (int i = 0; i < PROCS; i++) {
    jobs[i] = (thread_job){&barrier, source, MOEGEN_ERR_INVALID_ARGUMENT, NULL, 0};
    CHECK(pthread_create(&tids[i], NULL, compile_thread, &jobs[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < PROCS; i++) pthread_join(tids[i], NULL);
  pthread_barrier_destroy(&barrier);
  moegen_set_log(capture, &seen);
  for (int i = 0; i < PROCS; i++) {
    CHECK(jobs[i].st == MOEGEN_OK && jobs[i].size == jobs[0].size &&
              memcmp(jobs[i].cubin, jobs[0].cubin, jobs[0].size) == 0,
          "thread %d: %s or another cubin", i, moegen_status_string(jobs[i].st));
  }
  for (int i = 0; i < PROCS; i++) free(jobs[i].cubin);
  CHECK(atomic_load(&compiles) == 1, "%d compiles among %d threads, want 1", atomic_load(&compiles),
        PROCS);
  CHECK(count_files(dir, ".lock", NULL, 0) == 0, "lock file left in %s", dir);
  unsetenv("MOEGEN_CACHE_WAIT");
}

/* Log sinks of a lock holder that dies, or hangs, in its compile. */
static void die_in_compile(const char *line, void *user) {
  (void)user;
  if (strncmp(line, "moegen: compiling ", 18) == 0) kill(getpid(), SIGKILL);
}
static void stop_in_compile(const char *line, void *user) {
  (void)user;
  if (strncmp(line, "moegen: compiling ", 18) == 0) raise(SIGSTOP);
}

/* Forks a child that compiles `source` into the current cache and calls
 * `sink` on its lines; returns its pid once it is killed or stopped. */
static pid_t holder(const char *source, moegen_log_fn sink, int *status) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    moegen_set_log(sink, NULL);
    unsigned char *cubin;
    size_t size;
    char *log;
    moegen_cache_outcome how;
    moegen_cache_compile(&(moegen_cache_source){.body = source, .body_size = strlen(source)}, "tiny", "sm_90a", NULL, &cubin, &size, &log, &how);
    _exit(3); /* the sink was never called: no compile */
  }
  waitpid(pid, status, WUNTRACED);
  return pid;
}

/* A holder killed mid-compile leaves its lock file behind; the next compile
 * takes the lock at once (no waiting line) and removes the file. */
static void killed_holder(const char *root) {
  char dir[4096], source[512];
  snprintf(dir, sizeof dir, "%s/killed", root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  setenv("MOEGEN_CACHE_WAIT", "30", 1);
  variant(source, sizeof source, "killed");
  int status = 0;
  holder(source, die_in_compile, &status);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "holder status %d", status);
  CHECK(count_files(dir, ".lock", NULL, 0) == 1 && count_files(dir, ".cubin", NULL, 0) == 0,
        "the killed holder should leave its lock file and no entry");
  outcome o = compile(source, "sm_90a");
  CHECK(o.st == MOEGEN_OK && o.how == MOEGEN_CACHE_STORED && o.lines == 1 && o.seconds < 10,
        "after a killed holder: %s, outcome %d, %d lines, %.1f s", moegen_status_string(o.st),
        (int)o.how, o.lines, o.seconds);
  CHECK(count_files(dir, ".lock", NULL, 0) == 0, "lock file left in %s", dir);
  release(&o);
  unsetenv("MOEGEN_CACHE_WAIT");
}

/* A holder stopped mid-compile (alive, holding the lock): a waiter sends
 * one waiting line, gives up after MOEGEN_CACHE_WAIT seconds, says so in its
 * log and compiles (and stores) itself. */
static void hung_holder(const char *root) {
  char dir[4096], source[512];
  snprintf(dir, sizeof dir, "%s/hung", root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  variant(source, sizeof source, "hung");
  int status = 0;
  pid_t pid = holder(source, stop_in_compile, &status);
  CHECK(WIFSTOPPED(status), "holder status %d", status);
  setenv("MOEGEN_CACHE_WAIT", "1", 1);
  outcome o = compile(source, "sm_90a");
  unsetenv("MOEGEN_CACHE_WAIT");
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  CHECK(o.st == MOEGEN_OK && o.how == MOEGEN_CACHE_STORED && o.lines == 2,
        "after a hung holder: %s, outcome %d, %d lines", moegen_status_string(o.st), (int)o.how,
        o.lines);
  CHECK(strncmp(seen.prev, "moegen: waiting for another compile of tiny for sm_90a (lock: ", 62) == 0,
        "waiting line: '%s'", seen.prev);
  CHECK(strncmp(seen.last, "moegen: compiling tiny", 22) == 0, "progress line: '%s'", seen.last);
  CHECK(o.seconds >= 1 && o.seconds < 10, "waited %.2f s with MOEGEN_CACHE_WAIT=1", o.seconds);
  CHECK(o.log && strstr(o.log, "waited 1 s for the compile lock"), "log: %s",
        o.log ? o.log : "(none)");
  release(&o);
}

/* A lock file that cannot be opened (a directory in its place): the
 * compile goes on without the lock and still stores the entry. */
static void lock_unavailable(const char *root) {
  char dir[4096], source[512], entry[4200], lock[4200];
  snprintf(dir, sizeof dir, "%s/nolock", root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  variant(source, sizeof source, "nolock");
  outcome o = compile(source, "sm_90a");
  release(&o);
  CHECK(count_files(dir, ".cubin", entry, sizeof entry) == 1, "one entry in %s", dir);
  snprintf(lock, sizeof lock, "%.*s.lock", (int)(strlen(entry) - strlen(".cubin")), entry);
  CHECK(unlink(entry) == 0 && mkdir(lock, 0700) == 0, "replace %s by the directory %s", entry, lock);
  o = compile(source, "sm_90a");
  CHECK(o.st == MOEGEN_OK && o.how == MOEGEN_CACHE_STORED && o.lines == 1,
        "lock unavailable: %s, outcome %d, %d lines", moegen_status_string(o.st), (int)o.how,
        o.lines);
  release(&o);
  rmdir(lock);
}

/* ---------------------------------------------------------------- single process */

/* Cold compile then hit: line once, same bytes, entry published atomically. */
static void cold_then_hit(const char *dir, char *entry, size_t entry_size) {
  outcome cold = compile(tiny_kernel, "sm_90a");
  char expect[4400];
  snprintf(expect, sizeof expect,
           "moegen: compiling tiny for sm_90a with NVRTC (first use; cache: %s)", dir);
  CHECK(cold.st == MOEGEN_OK && cold.how == MOEGEN_CACHE_STORED, "cold: %s %s", moegen_status_string(cold.st),
        cold.log ? cold.log : "");
  CHECK(cold.lines == 1 && strcmp(seen.last, expect) == 0, "progress line: '%s'", seen.last);
  CHECK(count_files(dir, ".cubin", entry, entry_size) == 1, "one entry in %s", dir);
  CHECK(count_files(dir, ".tmp.", NULL, 0) == 0, "temporary file left in %s", dir);
  outcome hot = compile(tiny_kernel, "sm_90a");
  CHECK(hot.st == MOEGEN_OK && hot.how == MOEGEN_CACHE_HIT && hot.lines == 0,
        "hit: st %d outcome %d lines %d", hot.st, (int)hot.how, hot.lines);
  CHECK(hot.log == NULL, "hit log: %s", hot.log);
  CHECK(hot.size == cold.size && memcmp(hot.cubin, cold.cubin, cold.size) == 0, "hit bytes differ");
  CHECK(hot.seconds < cold.seconds, "hit %.3f ms not faster than cold %.3f ms", hot.seconds * 1e3,
        cold.seconds * 1e3);
  printf("cache: cold NVRTC compile %.1f ms, hit load %.3f ms (%zu-byte cubin)\n",
         cold.seconds * 1e3, hot.seconds * 1e3, cold.size);
  release(&cold);
  release(&hot);
}

/* The key covers the arch and the source. */
static void key_inputs(const char *dir) {
  outcome other_arch = compile(tiny_kernel, "sm_80");
  CHECK(other_arch.st == MOEGEN_OK && other_arch.how == MOEGEN_CACHE_STORED, "sm_80 must miss");
  char changed[sizeof tiny_kernel + 16];
  snprintf(changed, sizeof changed, "%s// v2\n", tiny_kernel);
  outcome other_source = compile(changed, "sm_90a");
  CHECK(other_source.st == MOEGEN_OK && other_source.how == MOEGEN_CACHE_STORED,
        "changed source must miss");
  CHECK(count_files(dir, ".cubin", NULL, 0) == 3, "three entries expected");
  release(&other_arch);
  release(&other_source);
}

/* Damages the entry with `damage`, then expects one line naming the
 * discarded entry, a rebuild (one progress line) and a later hit. */
static void corrupt_and_rebuild(const char *entry, const char *what, void (*damage)(FILE *f)) {
  FILE *f = fopen(entry, "r+b");
  CHECK(f != NULL, "open %s", entry);
  if (!f) return;
  damage(f);
  fclose(f);
  outcome o = compile(tiny_kernel, "sm_90a");
  CHECK(o.st == MOEGEN_OK && o.how == MOEGEN_CACHE_STORED && o.lines == 2,
        "%s entry: st %d outcome %d, %d lines", what, o.st, (int)o.how, o.lines);
  CHECK(strstr(seen.prev, "moegen: discarding corrupt cache entry") && strstr(seen.prev, entry),
        "%s: corrupt line '%s'", what, seen.prev);
  CHECK(strncmp(seen.last, "moegen: compiling tiny", 22) == 0, "%s: progress line '%s'", what,
        seen.last);
  CHECK(o.log && strstr(o.log, "was corrupt; rebuilt") && strstr(o.log, entry), "%s log: %s",
        what, o.log ? o.log : "(none)");
  outcome again = compile(tiny_kernel, "sm_90a");
  CHECK(again.st == MOEGEN_OK && again.how == MOEGEN_CACHE_HIT, "%s: rebuilt entry must hit", what);
  release(&o);
  release(&again);
}

static void flip_payload_byte(FILE *f) {
  fseek(f, 100, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 100, SEEK_SET);
  fputc(c ^ 0x40, f);
}

static void flip_magic(FILE *f) { fputc('X', f); }

static void truncate_file(FILE *f) { CHECK(ftruncate(fileno(f), 30) == 0, "truncate"); }

/* MOEGEN_CACHE=0: compiles every time, creates and writes nothing. */
static void disabled(const char *root) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/never-created", root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  setenv("MOEGEN_CACHE", "0", 1);
  char shown[64] = "x";
  moegen_cache_dir(shown, sizeof shown);
  CHECK(shown[0] == 0, "disabled cache dir shows '%s'", shown);
  for (int i = 0; i < 2; i++) {
    outcome o = compile(tiny_kernel, "sm_90a");
    CHECK(o.st == MOEGEN_OK && o.how == MOEGEN_CACHE_UNSTORED && o.lines == 1,
          "disabled: st %d outcome %d", o.st, (int)o.how);
    CHECK(strstr(seen.last, "(cache disabled)") != NULL, "line: %s", seen.last);
    release(&o);
  }
  CHECK(!exists(dir), "%s must not exist", dir);
  unsetenv("MOEGEN_CACHE");
}

/* A file where the directory should be: still compiles, says why uncached. */
static void unusable(const char *root) {
  char file[4096], below[4200];
  snprintf(file, sizeof file, "%s/a-file", root);
  snprintf(below, sizeof below, "%s/sub/dir", file);
  FILE *f = fopen(file, "w");
  CHECK(f != NULL, "create %s", file);
  if (f) fclose(f);
  const char *dirs[] = {file, below};
  for (int i = 0; i < 2; i++) {
    setenv("MOEGEN_CACHE_DIR", dirs[i], 1);
    outcome o = compile(tiny_kernel, "sm_90a");
    CHECK(o.st == MOEGEN_OK && o.how == MOEGEN_CACHE_UNSTORED && o.lines == 1 && o.size > 0,
          "unusable %s: %s", dirs[i],
          moegen_status_string(o.st));
    CHECK(o.log && strstr(o.log, dirs[i]) && strstr(o.log, "uncached"), "log: %s",
          o.log ? o.log : "(none)");
    release(&o);
  }
}

/* A compile error: the NVRTC log comes back and nothing is stored. */
static void compile_error(const char *dir) {
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  int before = count_files(dir, ".cubin", NULL, 0);
  outcome o = compile("extern \"C\" __global__ void k() { nope(); }\n", "sm_90a");
  CHECK(o.st == MOEGEN_ERR_COMPILE && o.cubin == NULL, "broken source: %s",
        moegen_status_string(o.st));
  CHECK(o.log && strstr(o.log, "nope"), "log: %s", o.log ? o.log : "(none)");
  CHECK(count_files(dir, ".cubin", NULL, 0) == before, "a failed compile stored an entry");
  release(&o);
}

/* $MOEGEN_CACHE_DIR, else $XDG_CACHE_HOME/moegen, else ~/.cache/moegen. */
static void fallbacks(void) {
  char buf[4096];
  setenv("MOEGEN_CACHE_DIR", "/x/explicit", 1);
  setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  setenv("HOME", "/x/home", 1);
  moegen_cache_dir(buf, sizeof buf);
  CHECK(strcmp(buf, "/x/explicit") == 0, "explicit: %s", buf);
  unsetenv("MOEGEN_CACHE_DIR");
  moegen_cache_dir(buf, sizeof buf);
  CHECK(strcmp(buf, "/x/xdg/moegen") == 0, "xdg: %s", buf);
  setenv("XDG_CACHE_HOME", "", 1);
  moegen_cache_dir(buf, sizeof buf);
  CHECK(strcmp(buf, "/x/home/.cache/moegen") == 0, "home: %s", buf);
}

/* A NULL sink silences the progress line. */
static void silenced(void) {
  setenv("MOEGEN_CACHE", "0", 1);
  moegen_set_log(NULL, NULL);
  int before = seen.lines;
  outcome o = compile(tiny_kernel, "sm_80");
  CHECK(o.st == MOEGEN_OK && seen.lines == before, "NULL sink still called");
  release(&o);
  unsetenv("MOEGEN_CACHE");
}

int main(void) {
  if (nvrtc_missing("test_runtime_cache")) return 77;
  char root[] = "/tmp/moegen-cache-test-XXXXXX";
  if (!mkdtemp(root)) return 1;
  char dir[4096], entry[4096] = "";
  snprintf(dir, sizeof dir, "%s/nested/cache", root); /* created with mkdir -p semantics */
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  unsetenv("MOEGEN_CACHE");
  moegen_set_log(capture, &seen);
  concurrent(root);
  threads(root);
  killed_holder(root);
  hung_holder(root);
  lock_unavailable(root);
  setenv("MOEGEN_CACHE_DIR", dir, 1);
  cold_then_hit(dir, entry, sizeof entry);
  key_inputs(dir);
  corrupt_and_rebuild(entry, "flipped payload byte", flip_payload_byte);
  corrupt_and_rebuild(entry, "bad magic", flip_magic);
  corrupt_and_rebuild(entry, "truncated", truncate_file);
  compile_error(dir);
  disabled(root);
  unusable(root);
  silenced();
  fallbacks();
  return check_result_in("test_runtime_cache", root);
}
