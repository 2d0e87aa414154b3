/* runtime/cache.c -- on-disk cache of NVRTC cubins, and the runtime's log sink.
 *
 * Key: SHA-256 of the compile's head (its MOEGEN_UNIT / MOEGEN_KERNEL
 * lines), of the SHA-256 of the module source (which its caller hashes once
 * for all of a module's compiles), and of everything else that changes the
 * cubin (cache_key).
 *
 * Entry file DIR/<key>.cubin:
 *   "MOEGENC1" | payload size (u64 little-endian) | SHA-256 of payload | payload
 * An entry whose magic, size or checksum is wrong is treated as a miss and
 * overwritten. Entries are published by write-to-temp, fsync, rename, so a
 * reader never sees a partial file and concurrent writers of the same key
 * are harmless (both write the same bytes).
 *
 * Compile lock DIR/<key>.lock: a cold compile of a key happens under an
 * exclusive flock on it, so of several processes (or threads: each opens
 * the file itself, and flock locks belong to the open file) missing the
 * same key at once one compiles and the others wait and load its entry.
 * The holder publishes the entry, then removes the lock file, then unlocks;
 * a process that got the lock checks that the path still names the file
 * it locked (else it locks the new one) and looks the entry up again before
 * compiling. A dead holder's lock is dropped by the kernel; a waiter gives
 * up after $MOEGEN_CACHE_WAIT seconds (a hung holder) and compiles
 * unlocked, as it does when the lock file cannot be opened (an unwritable
 * directory) or flock is unsupported.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "nvrtc.h"
#include "sha256.h"

#ifndef MOEGEN_VERSION_STRING
#error "MOEGEN_VERSION_STRING must be defined by the build (CMake: PROJECT_VERSION)"
#endif

enum {
  HEADER_SIZE = 8 + 8 + 32,
  ENTRY_PATH_MAX = PATH_MAX + 80,  /* DIR "/" key ".cubin" (or ".lock") */
  TEMP_PATH_MAX = ENTRY_PATH_MAX + 64, /* ... ".tmp.<pid>.<unique>" */
  MAX_ENTRY_SIZE = 1 << 30, /* larger files are not moegen entries */
  WAIT_DEFAULT_S = 600,      /* MOEGEN_CACHE_WAIT unset: well above any real compile */
  POLL_NS = 50 * 1000 * 1000 /* how often a waiter tries the lock again */
};
static const char MAGIC[8] = {'M', 'O', 'E', 'G', 'E', 'N', 'C', '1'};

/* ---------------------------------------------------------------- log sink */

static void stderr_sink(const char *line, void *user) {
  (void)user;
  fprintf(stderr, "%s\n", line);
}

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static moegen_log_fn g_log_fn = stderr_sink;
static void *g_log_user;

void moegen_set_log(moegen_log_fn fn, void *user) {
  pthread_mutex_lock(&g_log_lock);
  g_log_fn = fn;
  g_log_user = user;
  pthread_mutex_unlock(&g_log_lock);
}

void moegen_log_line(const char *line) {
  pthread_mutex_lock(&g_log_lock);
  moegen_log_fn fn = g_log_fn;
  void *user = g_log_user;
  pthread_mutex_unlock(&g_log_lock);
  if (fn) fn(line, user);
}

/* ---------------------------------------------------------------- notes */

/* A growing malloc'd text: the cache problems worked around, for *log. */
typedef struct notes {
  char *text;
  size_t len;
} notes;

/* Appends one printf-formatted line (dropped if out of memory). */
static void note(notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(notes *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int add = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *t = add < 0 ? NULL : realloc(n->text, n->len + (size_t)add + 2);
  if (!t) return;
  va_start(ap, fmt);
  vsnprintf(t + n->len, (size_t)add + 1, fmt, ap);
  va_end(ap);
  n->len += (size_t)add;
  t[n->len++] = '\n';
  t[n->len] = 0;
  n->text = t;
}

/* ---------------------------------------------------------------- directory */

static int cache_enabled(void) {
  const char *e = getenv("MOEGEN_CACHE");
  return !(e && strcmp(e, "0") == 0);
}

/* The configured directory (even if disabled) into buf; 0, or -1 if none. */
static int configured_dir(char *buf, size_t size) {
  const char *dir = getenv("MOEGEN_CACHE_DIR");
  if (dir && *dir) return snprintf(buf, size, "%s", dir) < (int)size ? 0 : -1;
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return snprintf(buf, size, "%s/moegen", xdg) < (int)size ? 0 : -1;
  const char *home = getenv("HOME");
  if (home && *home) return snprintf(buf, size, "%s/.cache/moegen", home) < (int)size ? 0 : -1;
  return -1;
}

void moegen_cache_dir(char *buf, size_t size) {
  if (size == 0) return;
  if (!cache_enabled() || configured_dir(buf, size) != 0) buf[0] = 0;
}

/* mkdir -p with mode 0700; 0 if `path` ends up a directory, else errno. */
static int make_dirs(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return ENAMETOOLONG;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return errno;
    *p = '/';
  }
  if (mkdir(buf, 0700) != 0 && errno != EEXIST) return errno;
  struct stat st;
  if (stat(buf, &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* ---------------------------------------------------------------- key */

/* Hashes one field as u64 little-endian length + bytes, so field
 * boundaries are part of the hash and concatenations cannot collide. */
static void hash_field(moegen_sha256 *s, const void *data, size_t n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  moegen_sha256_update(s, len, sizeof len);
  moegen_sha256_update(s, data, n);
}

static void hash_string(moegen_sha256 *s, const char *str) { hash_field(s, str, strlen(str)); }

/* key = SHA-256(head, SHA-256 of the body, option count, options..., NVRTC
 * version, arch, moegen version) as hex. MOEGEN_ERR_INVALID_ARGUMENT for an
 * unknown arch, MOEGEN_ERR_NO_NVRTC when NVRTC (hence its version) is
 * unavailable. */
static moegen_status cache_key(const moegen_cache_source *src, const char *arch, char key[65]) {
  const char *const *opts = moegen_nvrtc_options_for(arch);
  if (!opts) return MOEGEN_ERR_INVALID_ARGUMENT;
  int major, minor;
  if (moegen_nvrtc_version(&major, &minor) != MOEGEN_OK) return MOEGEN_ERR_NO_NVRTC;
  unsigned char body[32];
  if (src->body_sha256) memcpy(body, src->body_sha256, sizeof body);
  else moegen_sha256_of(src->body, src->body_size, body);
  moegen_sha256 s;
  moegen_sha256_init(&s);
  hash_string(&s, src->head ? src->head : "");
  hash_field(&s, body, sizeof body);
  size_t count = 0;
  while (opts[count]) count++;
  char text[32];
  snprintf(text, sizeof text, "%zu", count);
  hash_string(&s, text);
  for (size_t i = 0; i < count; i++) hash_string(&s, opts[i]);
  snprintf(text, sizeof text, "%d.%d", major, minor);
  hash_string(&s, text);
  hash_string(&s, arch);
  hash_string(&s, MOEGEN_VERSION_STRING);
  unsigned char digest[32];
  moegen_sha256_final(&s, digest);
  for (int i = 0; i < 32; i++) snprintf(key + 2 * i, 3, "%02x", digest[i]);
  return MOEGEN_OK;
}

/* head + body as one malloc'd NUL-terminated text (*size without the
 * NUL), or NULL if out of memory. */
static char *source_text(const moegen_cache_source *src, size_t *size) {
  size_t h = src->head ? strlen(src->head) : 0;
  char *text = malloc(h + src->body_size + 1);
  if (!text) return NULL;
  if (h) memcpy(text, src->head, h);
  memcpy(text + h, src->body, src->body_size);
  text[h + src->body_size] = 0;
  *size = h + src->body_size;
  return text;
}

/* ---------------------------------------------------------------- entries */

typedef enum entry_state { ENTRY_OK, ENTRY_MISSING, ENTRY_CORRUPT, ENTRY_UNREADABLE } entry_state;

static uint64_t load_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Reads exactly n bytes; 0 on success, -1 on error or early end of file. */
static int read_all(int fd, unsigned char *buf, size_t n) {
  while (n > 0) {
    ssize_t got = read(fd, buf, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    buf += got;
    n -= (size_t)got;
  }
  return 0;
}

/* Checks magic, size and checksum of a whole entry file held in memory. */
static int entry_valid(const unsigned char *file, size_t size) {
  if (size < HEADER_SIZE || memcmp(file, MAGIC, sizeof MAGIC) != 0) return 0;
  if (load_le64(file + 8) != size - HEADER_SIZE) return 0;
  unsigned char digest[32];
  moegen_sha256 s;
  moegen_sha256_init(&s);
  moegen_sha256_update(&s, file + HEADER_SIZE, size - HEADER_SIZE);
  moegen_sha256_final(&s, digest);
  return memcmp(digest, file + 16, 32) == 0;
}

/* Reads a whole file of at most MAX_ENTRY_SIZE bytes into a malloc'd buffer. */
static entry_state read_file(const char *path, unsigned char **data, size_t *size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ENTRY_MISSING : ENTRY_UNREADABLE;
  struct stat st;
  entry_state state = ENTRY_UNREADABLE;
  int known = fstat(fd, &st) == 0;
  if (known && st.st_size > MAX_ENTRY_SIZE) {
    state = ENTRY_CORRUPT;
  } else if (known && (*data = malloc((size_t)st.st_size + 1)) != NULL) {
    *size = (size_t)st.st_size;
    state = read_all(fd, *data, *size) == 0 ? ENTRY_OK : ENTRY_UNREADABLE;
    if (state != ENTRY_OK) free(*data);
  }
  close(fd);
  return state;
}

/* Reads and verifies the entry at path; on ENTRY_OK *cubin is malloc'd. */
static entry_state read_entry(const char *path, unsigned char **cubin, size_t *cubin_size) {
  unsigned char *file;
  size_t size;
  entry_state state = read_file(path, &file, &size);
  if (state != ENTRY_OK) return state;
  if (!entry_valid(file, size)) {
    free(file);
    return ENTRY_CORRUPT;
  }
  *cubin_size = size - HEADER_SIZE;
  memmove(file, file + HEADER_SIZE, *cubin_size);
  *cubin = file;
  return ENTRY_OK;
}

/* Writes all n bytes; 0 on success, else -1 with errno set. */
static int write_all(int fd, const unsigned char *buf, size_t n) {
  while (n > 0) {
    ssize_t put = write(fd, buf, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return -1;
    buf += put;
    n -= (size_t)put;
  }
  return 0;
}

/* Writes header + payload to a fresh file, fsyncs it; 0 or errno. */
static int write_file(const char *path, const unsigned char *cubin, size_t size) {
  unsigned char header[HEADER_SIZE];
  memcpy(header, MAGIC, sizeof MAGIC);
  for (int i = 0; i < 8; i++) header[8 + i] = (unsigned char)((uint64_t)size >> (8 * i));
  moegen_sha256 s;
  moegen_sha256_init(&s);
  moegen_sha256_update(&s, cubin, size);
  moegen_sha256_final(&s, header + 16);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  if (write_all(fd, header, sizeof header) != 0 || write_all(fd, cubin, size) != 0 ||
      fsync(fd) != 0)
    err = errno;
  if (close(fd) != 0 && !err) err = errno;
  return err;
}

/* Publishes the entry at path: write DIR/<key>.cubin.tmp.<pid>.<unique>,
 * rename. 1 if it is in place, else 0 (the reason noted). */
static int publish_entry(const char *path, const unsigned char *cubin, size_t size, notes *n) {
  static atomic_uint counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char tmp[TEMP_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u%09ld", path, (long)getpid(),
           atomic_fetch_add(&counter, 1), (long)ts.tv_nsec);
  int err = write_file(tmp, cubin, size);
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    note(n, "cannot write cache entry %s: %s (the compile result is used uncached)", path,
         strerror(err));
  }
  return !err;
}

/* ---------------------------------------------------------------- compile lock */

/* Seconds a waiter waits for another holder of the compile lock:
 * $MOEGEN_CACHE_WAIT (a number >= 0), else WAIT_DEFAULT_S. */
static double wait_bound(void) {
  const char *e = getenv("MOEGEN_CACHE_WAIT");
  char *end;
  double s = e && *e ? strtod(e, &end) : -1;
  return e && *e && !*end && s >= 0 ? s : WAIT_DEFAULT_S;
}

static double monotonic_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 1 if path names the file open as fd. */
static int names_file(const char *path, int fd) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Takes the compile lock at lock_path (see the top of this file): the
 * locked fd, or -1 to compile unlocked (no lock file, no flock, or the wait
 * bound passed: noted). While another holds it, sends one "waiting" line
 * and retries every POLL_NS; a lock file that was removed or replaced
 * meanwhile (its holder finished) is reopened at once. */
static int take_lock(const char *lock_path, const char *name, const char *arch, notes *n) {
  const double bound = wait_bound(), deadline = monotonic_seconds() + bound;
  int told = 0;
  for (;;) {
    int fd = open(lock_path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int locked, err;
    for (;;) {
      locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
      err = errno;
      if (locked || (err != EWOULDBLOCK && err != EINTR) || !names_file(lock_path, fd)) break;
      if (!told) {
        char line[ENTRY_PATH_MAX + 256];
        snprintf(line, sizeof line, "moegen: waiting for another compile of %s for %s (lock: %s)",
                 name, arch, lock_path);
        moegen_log_line(line);
        told = 1;
      }
      if (monotonic_seconds() >= deadline) {
        note(n, "waited %g s for the compile lock %s held by another compile; compiled without it",
             bound, lock_path);
        close(fd);
        return -1;
      }
      nanosleep(&(struct timespec){0, POLL_NS}, NULL);
    }
    if (locked && names_file(lock_path, fd)) return fd;
    close(fd);
    if (locked || err == EWOULDBLOCK || err == EINTR) continue; /* a stale file: lock the new one */
    return -1; /* flock unsupported here */
  }
}

/* Removes the lock file, then unlocks (close drops the flock). */
static void drop_lock(int fd, const char *lock_path) {
  if (fd < 0) return;
  unlink(lock_path);
  close(fd);
}

/* ---------------------------------------------------------------- compile */

/* Where entries go: 1 with dir set if usable, 0 if disabled or unusable
 * (the reason noted), and the text for the progress line in `where`. */
static int usable_dir(char *dir, size_t size, char *where, size_t where_size, notes *n) {
  if (!cache_enabled()) {
    snprintf(where, where_size, "cache disabled");
    return 0;
  }
  if (configured_dir(dir, size) != 0) {
    note(n, "no cache directory (set MOEGEN_CACHE_DIR, XDG_CACHE_HOME or HOME); compiled uncached");
    snprintf(where, where_size, "cache unavailable");
    return 0;
  }
  int err = make_dirs(dir);
  if (err) {
    note(n, "cache directory %s is unusable (%s); compiled uncached", dir, strerror(err));
    snprintf(where, where_size, "cache unavailable: %s", dir);
    return 0;
  }
  snprintf(where, where_size, "first use; cache: %s", dir);
  return 1;
}

/* The progress line before a cold compile: the banner's, once for all the
 * compiles that share it, else one for `name`. */
static void announce(moegen_cache_banner *banner, const char *name, const char *arch,
                     const char *where) {
  if (banner && atomic_flag_test_and_set(&banner->told)) return;
  char line[PATH_MAX + 320];
  snprintf(line, sizeof line, "moegen: compiling %s for %s with NVRTC (%s)",
           banner ? banner->name : name, arch, where);
  moegen_log_line(line);
}

/* Cold path: progress line, NVRTC, then publish (if a path is given);
 * *outcome STORED or UNSTORED on success. */
static moegen_status compile_and_store(const moegen_cache_source *src, const char *name,
                                       const char *arch, moegen_cache_banner *banner,
                                       const char *where, const char *path, unsigned char **cubin,
                                       size_t *cubin_size, moegen_cache_outcome *outcome,
                                       notes *n) {
  announce(banner, name, arch, where);
  size_t size;
  char *text = source_text(src, &size);
  if (!text) return MOEGEN_ERR_OUT_OF_MEMORY;
  char file_name[256], *log = NULL;
  snprintf(file_name, sizeof file_name, "%s.cu", name);
  moegen_status st = moegen_nvrtc_compile(text, size, file_name, arch, 0, cubin, cubin_size, &log);
  free(text);
  if (st != MOEGEN_OK) note(n, "%s", log ? log : "NVRTC gave no log");
  else if (path && publish_entry(path, *cubin, *cubin_size, n)) *outcome = MOEGEN_CACHE_STORED;
  free(log);
  return st;
}

moegen_status moegen_cache_compile(const moegen_cache_source *src, const char *name,
                                   const char *arch, moegen_cache_banner *banner,
                                   unsigned char **cubin, size_t *cubin_size, char **log,
                                   moegen_cache_outcome *outcome) {
  *cubin = NULL;
  *cubin_size = 0;
  *log = NULL;
  *outcome = MOEGEN_CACHE_UNSTORED;
  char key[65];
  moegen_status st = cache_key(src, arch, key);
  if (st != MOEGEN_OK) { /* unknown arch or no NVRTC: let NVRTC's wrapper say why */
    size_t size;
    char *text = source_text(src, &size);
    if (!text) return MOEGEN_ERR_OUT_OF_MEMORY;
    st = moegen_nvrtc_compile(text, size, name, arch, 0, cubin, cubin_size, log);
    free(text);
    return st;
  }
  notes n = {NULL, 0};
  char dir[PATH_MAX], where[PATH_MAX + 64], path[ENTRY_PATH_MAX], lock_path[ENTRY_PATH_MAX];
  int cached = usable_dir(dir, sizeof dir, where, sizeof where, &n), lock = -1;
  entry_state state = ENTRY_MISSING;
  if (cached) {
    snprintf(path, sizeof path, "%s/%s.cubin", dir, key);
    snprintf(lock_path, sizeof lock_path, "%s/%s.lock", dir, key);
    state = read_entry(path, cubin, cubin_size);
    if (state != ENTRY_OK) {
      /* A miss: compile under the lock, unless another compile of the key
       * stored the entry while this one waited for it (or before it got it). */
      lock = take_lock(lock_path, name, arch, &n);
      state = read_entry(path, cubin, cubin_size);
    }
  }
  if (state == ENTRY_OK) {
    drop_lock(lock, lock_path);
    free(n.text); /* a wait that ended in a hit worked nothing around */
    *outcome = MOEGEN_CACHE_HIT;
    return MOEGEN_OK;
  }
  if (state == ENTRY_UNREADABLE) note(&n, "cache entry %s is unreadable; recompiled", path);
  if (state == ENTRY_CORRUPT) {
    char line[ENTRY_PATH_MAX + 96];
    snprintf(line, sizeof line,
             "moegen: discarding corrupt cache entry %s (bad header, size or checksum)", path);
    moegen_log_line(line);
  }
  st = compile_and_store(src, name, arch, banner, where, cached ? path : NULL, cubin, cubin_size,
                         outcome, &n);
  drop_lock(lock, lock_path);
  if (state == ENTRY_CORRUPT && *outcome == MOEGEN_CACHE_STORED)
    note(&n, "cache entry %s was corrupt; rebuilt", path);
  *log = n.text;
  return st;
}
