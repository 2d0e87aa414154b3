/* tests/unit/test_runtime_cache.c -- runtime/cache.c: cold compile and hit,
 * the progress line, corrupt entries, MOEGEN_CACHE=0, an unusable directory,
 * and the directory fallbacks. Uses its own temporary directory. Exit 77
 * only when libnvrtc.so.13 cannot be loaded. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
  char last[4400];
} captured;

static void capture(const char *line, void *user) {
  captured *c = user;
  c->lines++;
  snprintf(c->last, sizeof c->last, "%s", line);
}

static captured seen;

/* One cache_compile call and what it did. */
typedef struct outcome {
  moegen_status st;
  int hit;
  int lines; /* progress lines sent during the call */
  double seconds;
  unsigned char *cubin;
  size_t size;
  char *log;
} outcome;

static outcome compile(const char *source, const char *arch) {
  outcome o;
  int before = seen.lines;
  double t0 = now_seconds();
  o.st = moegen_cache_compile(source, strlen(source), "tiny", arch, &o.cubin, &o.size, &o.log,
                              &o.hit);
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

/* Cold compile then hit: line once, same bytes, entry published atomically. */
static void cold_then_hit(const char *dir, char *entry, size_t entry_size) {
  outcome cold = compile(tiny_kernel, "sm_90a");
  char expect[4400];
  snprintf(expect, sizeof expect,
           "moegen: compiling tiny for sm_90a with NVRTC (first use; cache: %s)", dir);
  CHECK(cold.st == MOEGEN_OK && !cold.hit, "cold: %s %s", moegen_status_string(cold.st),
        cold.log ? cold.log : "");
  CHECK(cold.lines == 1 && strcmp(seen.last, expect) == 0, "progress line: '%s'", seen.last);
  CHECK(count_files(dir, ".cubin", entry, entry_size) == 1, "one entry in %s", dir);
  CHECK(count_files(dir, ".tmp.", NULL, 0) == 0, "temporary file left in %s", dir);
  outcome hot = compile(tiny_kernel, "sm_90a");
  CHECK(hot.st == MOEGEN_OK && hot.hit && hot.lines == 0, "hit: st %d hit %d lines %d", hot.st,
        hot.hit, hot.lines);
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
  CHECK(other_arch.st == MOEGEN_OK && !other_arch.hit, "sm_80 must miss");
  char changed[sizeof tiny_kernel + 16];
  snprintf(changed, sizeof changed, "%s// v2\n", tiny_kernel);
  outcome other_source = compile(changed, "sm_90a");
  CHECK(other_source.st == MOEGEN_OK && !other_source.hit, "changed source must miss");
  CHECK(count_files(dir, ".cubin", NULL, 0) == 3, "three entries expected");
  release(&other_arch);
  release(&other_source);
}

/* Damages the entry with `damage`, then expects a rebuild and a later hit. */
static void corrupt_and_rebuild(const char *entry, const char *what, void (*damage)(FILE *f)) {
  FILE *f = fopen(entry, "r+b");
  CHECK(f != NULL, "open %s", entry);
  if (!f) return;
  damage(f);
  fclose(f);
  outcome o = compile(tiny_kernel, "sm_90a");
  CHECK(o.st == MOEGEN_OK && !o.hit && o.lines == 1, "%s entry: st %d hit %d", what, o.st, o.hit);
  CHECK(o.log && strstr(o.log, "was corrupt; rebuilt") && strstr(o.log, entry), "%s log: %s",
        what, o.log ? o.log : "(none)");
  outcome again = compile(tiny_kernel, "sm_90a");
  CHECK(again.st == MOEGEN_OK && again.hit, "%s: rebuilt entry must hit", what);
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
    CHECK(o.st == MOEGEN_OK && !o.hit && o.lines == 1, "disabled: st %d hit %d", o.st, o.hit);
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
    CHECK(o.st == MOEGEN_OK && !o.hit && o.size > 0, "unusable %s: %s", dirs[i],
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
