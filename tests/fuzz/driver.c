/* tests/fuzz/driver.c -- a self-contained fuzz driver for a libFuzzer entry
 * point (LLVMFuzzerTestOneInput), for compilers without libFuzzer (gcc).
 *
 *   fuzz_config [-t SECONDS] [-s SEED] [-o DIR] [-k DIR] [-x DICT] [-T SECONDS] PATH...
 *
 * PATHs are corpus files or directories of them. Every corpus input is run
 * first (a regression replay: each must pass); then, until SECONDS have
 * passed since the start (-t, default 60; 0: the replay only), inputs made
 * by mutating the pool are run: bit flips, byte changes, inserted and
 * deleted ranges, dictionary tokens (-x, libFuzzer's dictionary format),
 * changed decimal numbers and splices of two pool inputs. Feedback is coverage: the code under test is
 * compiled with -fsanitize-coverage=trace-pc, and an input that reaches a
 * new edge (or a new hit-count bucket of one) joins the pool, and is also
 * written to the -k DIR if one is given. The environment's
 * MOEGEN_FUZZ_SECONDS and MOEGEN_FUZZ_SEED replace -t and -s (so that
 * `MOEGEN_FUZZ_SECONDS=600 ctest -L fuzz` runs longer); the seed defaults to
 * one from the clock and is printed.
 *
 * A finding -- a sanitizer report, an abort (the entry point's invariant
 * checks), a signal, or one input running over -T SECONDS (default 10) --
 * writes the input to DIR/crash-HASH (-o, default .), prints its path and
 * the input as a C string (to copy from a CI log), and exits non-zero. Output: one status line
 * every 15 s and a summary (execs, exec/s, pool, coverage features).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

#include "read_file.h" /* moegen_read_file, of the library under test */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LEN 16384     /* longest input the mutators make */
#define MAX_POOL 20000    /* most inputs kept */
#define MAP_SIZE (1u << 16)
#define STATUS_EVERY 15.0 /* seconds between status lines */

typedef struct input {
  uint8_t *data;
  size_t len;
} input;

/* ---------------------------------------------------------------- coverage */

static uint8_t hits[MAP_SIZE]; /* edge hit counts of the running input */
static uint8_t seen[MAP_SIZE]; /* hit-count buckets reached so far, a bit each */
static uintptr_t prev_pc;

/* Called by -fsanitize-coverage=trace-pc code at every edge: counts the
 * edge from the previous call site to this one (AFL's scheme). */
__attribute__((no_sanitize("address", "undefined"))) void __sanitizer_cov_trace_pc(void) {
  /* relative to a function of the same executable, so that the map does not move with ASLR */
  uintptr_t pc = (uintptr_t)__builtin_return_address(0) - (uintptr_t)LLVMFuzzerTestOneInput;
  uintptr_t cur = (pc ^ pc >> 13) * 0x9e3779b1u % MAP_SIZE;
  uint8_t *h = &hits[(cur ^ prev_pc) % MAP_SIZE];
  if (*h < 255) ++*h;
  prev_pc = cur >> 1;
}

/* The bucket bit of a hit count: 1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+. */
static uint8_t bucket(uint8_t n) {
  return n == 0 ? 0 : n == 1 ? 1 : n == 2 ? 2 : n == 3 ? 4 : n < 8 ? 8 : n < 16 ? 16 : n < 32 ? 32
       : n < 128 ? 64 : 128;
}

/* Folds the running input's hits into seen and clears them; returns the
 * number of new (edge, bucket) features. */
static int take_coverage(void) {
  int fresh = 0;
  for (size_t i = 0; i < MAP_SIZE; i++) {
    if (!hits[i]) continue;
    uint8_t b = bucket(hits[i]);
    if (b & ~seen[i]) fresh++, seen[i] |= b;
    hits[i] = 0;
  }
  return fresh;
}

/* The number of (edge, bucket) features reached so far. */
static int features(void) {
  int n = 0;
  for (size_t i = 0; i < MAP_SIZE; i++) n += __builtin_popcount(seen[i]);
  return n;
}

/* ---------------------------------------------------------------- findings */

static const char *out_dir = ".";
static const uint8_t *current; /* the input running now */
static size_t current_len;

/* write(2) of a whole string (async-signal-safe). */
static void say(const char *s) {
  for (size_t n = strlen(s); n > 0;) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w, n -= (size_t)w;
  }
}

/* Writes the running input to out_dir/crash-HASH and prints its path and
 * the input as a C string (at most 4 KiB of it); async-signal-safe. */
static void save_current(const char *why) {
  static const char hex[] = "0123456789abcdef";
  static char path[4096], text[4 * 4096 + 1];
  uint64_t h = 1469598103934665603u;
  for (size_t i = 0; i < current_len; i++) h = (h ^ current[i]) * 1099511628211u;
  size_t n = strlen(out_dir);
  if (n > sizeof path - 32) n = sizeof path - 32;
  memcpy(path, out_dir, n);
  memcpy(path + n, "/crash-", 7);
  n += 7;
  for (int i = 15; i >= 0; i--) path[n++] = hex[h >> (4 * i) & 15];
  path[n] = 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    for (size_t done = 0; done < current_len;) {
      ssize_t w = write(fd, current + done, current_len - done);
      if (w <= 0) break;
      done += (size_t)w;
    }
    close(fd);
  }
  say("fuzz_config: finding (");
  say(why);
  say("), input written to ");
  say(fd >= 0 ? path : "(cannot create the crash file)");
  say("\nfuzz_config: the input: \"");
  size_t t = 0;
  for (size_t i = 0; i < current_len && i < 4096; i++) {
    uint8_t c = current[i];
    const char *esc = strchr("\"\\\n\t", c);
    if (c && esc) {
      text[t++] = '\\', text[t++] = "\"\\nt"[esc - "\"\\\n\t"];
    } else if (c >= 0x20 && c < 0x7f) {
      text[t++] = (char)c;
    } else {
      text[t++] = '\\', text[t++] = 'x', text[t++] = hex[c >> 4], text[t++] = hex[c & 15];
      if (i + 1 < current_len && strchr("0123456789abcdefABCDEF", current[i + 1])) {
        text[t++] = '"', text[t++] = '"'; /* so the next character is no hex digit of it */
      }
    }
    if (t > sizeof text - 8) break;
  }
  text[t] = 0;
  say(text);
  say(current_len > 4096 ? "\"...\n" : "\"\n");
}

/* UBSan's defaults: a report aborts (so on_signal keeps the input), with
 * its stack. UBSAN_OPTIONS still overrides them. */
const char *__ubsan_default_options(void) { return "print_stacktrace=1:abort_on_error=1"; }

/* ASan's death callback (after its report). */
static void on_death(void) {
  if (current) save_current("sanitizer report");
}

/* Signal handler: SIGALRM is a timeout, SIGABRT a failed check or a UBSan report. */
static void on_signal(int sig) {
  if (current) save_current(sig == SIGALRM ? "timeout" : "abort");
  signal(sig, SIG_DFL);
  if (sig == SIGALRM) _exit(70);
  raise(sig);
}

/* ---------------------------------------------------------------- running */

static unsigned per_input_seconds = 10;
static unsigned long execs;

/* Runs one input under the timeout; returns its new coverage features. */
static int run(const uint8_t *data, size_t len) {
  current = data, current_len = len;
  prev_pc = 0;
  alarm(per_input_seconds);
  LLVMFuzzerTestOneInput(data, len);
  alarm(0);
  current = NULL;
  execs++;
  return take_coverage();
}

/* ---------------------------------------------------------------- the pool and the dictionary */

static input pool[MAX_POOL];
static size_t pool_len;
static input dict[1024];
static size_t dict_len;

static uint64_t rng_state;

/* xorshift64*: a uniform-enough 64-bit number. */
static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717u;
}

/* A random number in [0, n) (0 for n = 0). */
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Adds a copy of data to the pool (while there is room). */
static void keep(const uint8_t *data, size_t len) {
  if (pool_len == MAX_POOL) return;
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) return;
  memcpy(copy, data, len);
  pool[pool_len++] = (input){copy, len};
}

/* Reads a libFuzzer dictionary: lines [name=]"value" with \\, \" and \xNN
 * escapes; # comments. Returns 0, or -1 if the file cannot be read. */
static int load_dict(const char *path) {
  size_t len;
  char *text = moegen_read_file(path, &len);
  if (!text) return -1;
  for (char *p = text, *end = text + len; p < end && dict_len < 1024;) {
    char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    char *q = memchr(p, '"', (size_t)(eol - p));
    if (q && *p != '#') {
      uint8_t value[256];
      size_t n = 0;
      for (q++; q < eol && *q != '"' && n < sizeof value; q++) {
        if (*q == '\\' && q + 1 < eol && q[1] == 'x' && q + 3 < eol) {
          char h[3] = {q[2], q[3], 0};
          value[n++] = (uint8_t)strtoul(h, NULL, 16);
          q += 3;
        } else {
          value[n++] = (uint8_t)(*q == '\\' && q + 1 < eol ? *++q : *q);
        }
      }
      uint8_t *copy = malloc(n ? n : 1);
      if (copy) memcpy(copy, value, n), dict[dict_len++] = (input){copy, n};
    }
    p = eol + 1;
  }
  free(text);
  return 0;
}

/* ---------------------------------------------------------------- mutation */

/* Inserts n bytes at pos of buf (len bytes, room for MAX_LEN); returns the new length. */
static size_t insert(uint8_t *buf, size_t len, size_t pos, const uint8_t *bytes, size_t n) {
  if (len + n > MAX_LEN) n = MAX_LEN - len;
  memmove(buf + pos + n, buf + pos, len - pos);
  memcpy(buf + pos, bytes, n);
  return len + n;
}

/* Replaces the decimal number at or after pos in buf (len bytes) with one
 * near it, a small one or a power of two; returns the new length. */
static size_t renumber(uint8_t *buf, size_t len, size_t pos) {
  while (pos < len && (buf[pos] < '0' || buf[pos] > '9')) pos++;
  if (pos == len) return len;
  size_t end = pos;
  long long v = 0;
  while (end < len && buf[end] >= '0' && buf[end] <= '9' && end - pos < 18)
    v = v * 10 + (buf[end++] - '0');
  switch (below(4)) {
  case 0: v += (long long)below(33) - 16; break;
  case 1: v = (long long)below(300); break;
  case 2: v = 1ll << below(63); break;
  default: v = v * (long long)(2 + below(3)) + (long long)below(3) - 1; break;
  }
  char text[24];
  int n = snprintf(text, sizeof text, "%lld", v);
  memmove(buf + pos, buf + end, len - end);
  return insert(buf, len - (end - pos), pos, (const uint8_t *)text, (size_t)n);
}

/* Applies one random mutation to buf (len bytes); returns the new length. */
static size_t mutate(uint8_t *buf, size_t len) {
  static const char chars[] = "{}[]\"',=:.-+0123456789eE\n \\@";
  static const uint8_t kinds[] = {'L', 'J', 'S'};
  size_t pos = below(len + 1), n;
  uint8_t bytes[16];
  const input *other;
  switch (below(12)) {
  case 0: /* flip a bit */
    if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
    return len;
  case 1: /* a random byte */
    if (len) buf[below(len)] = (uint8_t)rnd();
    return len;
  case 2: /* a syntax character */
    if (len) buf[below(len)] = (uint8_t)chars[below(sizeof chars - 1)];
    return len;
  case 3: /* delete a range */
    if (pos == len) return len;
    n = 1 + below(len - pos < 16 ? len - pos : 16);
    memmove(buf + pos, buf + pos + n, len - pos - n);
    return len - n;
  case 4: /* insert random bytes */
    n = 1 + below(8);
    for (size_t i = 0; i < n; i++) bytes[i] = (uint8_t)rnd();
    return insert(buf, len, pos, bytes, n);
  case 5: /* duplicate a range */
    if (pos == len) return len;
    n = 1 + below(len - pos < 64 ? len - pos : 64);
    uint8_t range[64];
    memcpy(range, buf + pos, n);
    return insert(buf, len, below(len + 1), range, n);
  case 6: /* insert a dictionary token */
    if (!dict_len) return len;
    other = &dict[below(dict_len)];
    return insert(buf, len, pos, other->data, other->len);
  case 7: /* overwrite with a dictionary token */
    if (!dict_len) return len;
    other = &dict[below(dict_len)];
    n = other->len < len - pos ? other->len : len - pos;
    memcpy(buf + pos, other->data, n);
    return len;
  case 8: /* splice: this input's head, another's tail */
    other = &pool[below(pool_len)];
    n = below(other->len + 1);
    if (pos + other->len - n > MAX_LEN) return len;
    memcpy(buf + pos, other->data + n, other->len - n);
    return pos + other->len - n;
  case 9:
  case 10: /* another number */
    return renumber(buf, len, pos);
  default: /* another input kind */
    if (len) buf[0] = kinds[below(3)];
    return len;
  }
}

/* ---------------------------------------------------------------- main */

/* Seconds on the monotonic clock. */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* qsort order of file names (char *). */
static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs the corpus file at path (or each file of the directory, in name
 * order) and adds it to the pool; returns the number of files, -1 if path
 * cannot be read. */
static int replay(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    size_t len;
    uint8_t *data = (uint8_t *)moegen_read_file(path, &len);
    if (!data) return -1;
    if (len > MAX_LEN) len = MAX_LEN;
    memset(hits, 0, sizeof hits); /* not the edges of reading the file */
    run(data, len);
    keep(data, len);
    free(data);
    return 1;
  }
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char **more = realloc(names, (n + 1) * sizeof *names);
    if (!more) break;
    names = more;
    names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
    if (names[n]) sprintf(names[n], "%s/%s", path, e->d_name), n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, compare_names);
  int files = 0;
  for (size_t i = 0; i < n; i++) {
    int got = replay(names[i]);
    if (got > 0) files += got;
    free(names[i]);
  }
  free(names);
  return files;
}

/* Prints the usage line; returns EX_USAGE. */
static int usage(void) {
  fprintf(stderr, "usage: fuzz_config [-t SECONDS] [-s SEED] [-o DIR] [-k DIR] [-x DICT] "
                  "[-T SECONDS] PATH...\n");
  return 64;
}

/* See the file comment: replay, then fuzz until the time is up. 0 when
 * nothing was found. */
int main(int argc, char **argv) {
  double seconds = 60;
  uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
  const char *keep_dir = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "t:s:o:k:x:T:")) != -1) {
    switch (opt) {
    case 't': seconds = atof(optarg); break;
    case 's': seed = strtoull(optarg, NULL, 0); break;
    case 'o': out_dir = optarg; break;
    case 'k': keep_dir = optarg; break;
    case 'T': per_input_seconds = (unsigned)atoi(optarg); break;
    case 'x':
      if (load_dict(optarg) == 0) break;
      fprintf(stderr, "fuzz_config: cannot read %s\n", optarg);
      return 66;
    default: return usage();
    }
  }
  if (optind == argc) return usage();
  if (getenv("MOEGEN_FUZZ_SECONDS")) seconds = atof(getenv("MOEGEN_FUZZ_SECONDS"));
  if (getenv("MOEGEN_FUZZ_SEED")) seed = strtoull(getenv("MOEGEN_FUZZ_SEED"), NULL, 0);
  rng_state = seed ? seed : 1;
  mkdir(out_dir, 0755);
  if (keep_dir) mkdir(keep_dir, 0755);
  __sanitizer_set_death_callback(on_death);
  signal(SIGABRT, on_signal);
  signal(SIGALRM, on_signal); /* SIGSEGV and the like: ASan's report, then on_death */

  double start = now();
  for (int i = optind; i < argc; i++) {
    int files = replay(argv[i]);
    if (files < 0) return fprintf(stderr, "fuzz_config: cannot read %s\n", argv[i]), 66;
  }
  if (pool_len == 0) keep((const uint8_t *)"S", 1);
  printf("fuzz_config: replayed %zu corpus inputs in %.1f s; %d features; seed %llu, %.0f s\n",
         pool_len, now() - start, features(), (unsigned long long)seed, seconds);
  fflush(stdout);

  static uint8_t buf[MAX_LEN];
  double next_status = start + STATUS_EVERY, t;
  while ((t = now()) - start < seconds) {
    const input *parent = &pool[below(pool_len)];
    size_t len = parent->len;
    memcpy(buf, parent->data, len);
    for (int m = 1 << below(4); m > 0; m--) len = mutate(buf, len);
    if (run(buf, len) > 0) {
      keep(buf, len);
      if (keep_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/pool-%06zu", keep_dir, pool_len);
        FILE *f = fopen(path, "wb");
        if (f) fwrite(buf, 1, len, f), fclose(f);
      }
    }
    if (t >= next_status) {
      printf("fuzz_config: %.0f s: %lu execs (%.0f/s), pool %zu, %d features\n", t - start,
             execs, execs / (t - start), pool_len, features());
      fflush(stdout);
      next_status += STATUS_EVERY;
    }
  }
  t = now() - start;
  printf("fuzz_config: done: %lu execs in %.1f s (%.0f/s), pool %zu, %d features, no findings\n",
         execs, t, t > 0 ? execs / t : 0.0, pool_len, features());
  return 0;
}
