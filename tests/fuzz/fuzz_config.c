/* tests/fuzz/fuzz_config.c -- the fuzz entry point of the three config inputs.
 *
 * One input is one config source. Its first byte picks the kind, the rest is
 * the text:
 *   'L'  a Lua config file          (moegen_config_load_lua)
 *   'J'  a Hugging Face config.json (moegen_config_load_hf)
 *   'S'  a --set list: one KEY=VALUE a line (moegen_config_set, argument
 *        position = line number); a line "@NAME" applies preset NAME
 *        (moegen_config_preset) instead
 * (any other first byte: byte % 3, in that order). The text goes onto the
 * defaults through the library's public loaders, then moegen_config_validate,
 * the way `moegen` builds a config. Invariants checked (a failure aborts):
 *   - a failing call returns one of the codes its contract lists, with a
 *     message that says where (the file, "command-line argument N", or the
 *     origin of a field); a failing file load leaves the config unchanged;
 *   - a validated config prints (moegen_config_to_lua) to the length it
 *     announces, and that text, loaded as a Lua file, and the config's keys
 *     as a --set list, both give the same config, which validates and
 *     prints to the same text;
 *   - a validated config renders (moegen_render, JIT mode) for sm_90a and
 *     for sm_80 (the portable GEMM); each distinct config is rendered once
 *     per process, as rendering is the slow step.
 * Built with tests/fuzz/driver.c (gcc, CTest) or with libFuzzer (clang,
 * MOEGEN_FUZZ=ON); see tests/fuzz/fuzz.cmake.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sysexits.h>
#include <unistd.h>

#include "moegen/config.h"
#include "moegen/moegen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints "fuzz_config: invariant failed: ..." and aborts (the driver or
 * libFuzzer then keeps the input). */
#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "fuzz_config: invariant failed (%s:%d): ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                              \
      fputc('\n', stderr);                                                       \
      abort();                                                                   \
    }                                                                            \
  } while (0)

/* ---------------------------------------------------------------- the input file */

/* The path of an in-memory file (memfd) holding the len bytes at text; the
 * loaders read files by path. The file is reused by every call. */
static const char *as_file(const void *text, size_t len) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz_config", 0);
    CHECK(fd >= 0, "memfd_create failed");
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, text, len, 0) == (ssize_t)len,
        "cannot write the input file");
  return path;
}

/* ---------------------------------------------------------------- checks */

/* Checks a failed call's result: rc is one of the codes in `codes` (0
 * ends the list), err agrees, and the message is non-empty, NUL-terminated
 * and starts with one of the NULL-terminated `wheres`. */
static void check_failure(const char *call, int rc, const moegen_error *err, const int *codes,
                          const char *const *wheres) {
  bool listed = false;
  for (const int *c = codes; *c; c++) listed |= rc == *c;
  CHECK(listed, "%s returned %d: not a code its contract lists (%s)", call, rc, err->msg);
  CHECK(err->code == rc, "%s returned %d but err->code is %d", call, rc, err->code);
  CHECK(memchr(err->msg, 0, sizeof err->msg) && err->msg[0], "%s: empty or unterminated message",
        call);
  bool placed = false;
  for (const char *const *w = wheres; *w; w++) placed |= strncmp(err->msg, *w, strlen(*w)) == 0;
  CHECK(placed, "%s: the message does not say where: \"%s\"", call, err->msg);
}

/* Whether a and b hold the same values (origins aside). */
static bool same_values(const moegen_config *a, const moegen_config *b) {
  return strcmp(a->name, b->name) == 0 && a->experts == b->experts && a->topk == b->topk &&
         a->hidden == b->hidden && a->ffn == b->ffn && a->score == b->score &&
         a->pre_softmax == b->pre_softmax && a->groups == b->groups &&
         a->group_topk == b->group_topk && a->expert_bias == b->expert_bias &&
         memcmp(&a->scaling, &b->scaling, sizeof a->scaling) == 0 &&
         a->logits_dtype == b->logits_dtype && a->dtype == b->dtype &&
         a->shared_experts == b->shared_experts &&
         memcmp(&a->aux_loss_coeff, &b->aux_loss_coeff, sizeof a->aux_loss_coeff) == 0 &&
         a->quantile_balancing == b->quantile_balancing && a->router_bwd == b->router_bwd &&
         a->recipe == b->recipe && a->fp8_grad_format == b->fp8_grad_format &&
         a->fp8_scale == b->fp8_scale;
}

/* The config as Lua text (moegen_config_to_lua), malloc'd; checks that the
 * announced length is the written one. */
static char *lua_text(const moegen_config *c) {
  size_t n = moegen_config_to_lua(c, NULL, 0);
  char *text = malloc(n + 1);
  CHECK(text, "out of memory");
  CHECK(moegen_config_to_lua(c, text, n + 1) == n && strlen(text) == n,
        "moegen_config_to_lua wrote another length than it announced (%zu)", n);
  return text;
}

/* Loads `text` as a Lua file onto the defaults into out; checks that it loads and validates. */
static void reload_lua(const char *text, moegen_config *out) {
  moegen_error err = {0};
  moegen_config_defaults(out);
  int rc = moegen_config_load_lua(out, as_file(text, strlen(text)), &err);
  CHECK(rc == 0, "the printed config does not load: %s\n%s", err.msg, text);
  rc = moegen_config_validate(out, &err);
  CHECK(rc == 0, "the printed config does not validate: %s\n%s", err.msg, text);
}

/* Applies the config printed as `text` (moegen_config_to_lua: a line
 * "  KEY = VALUE," a key) as one --set KEY=VALUE a key onto the defaults
 * into out, enum values without their quotes and the name as `name` (the
 * text escapes it); checks that each is accepted. */
static void set_keys(const char *text, const char *name, moegen_config *out) {
  moegen_error err = {0};
  int pos = 0;
  moegen_config_defaults(out);
  for (const char *p = strstr(text, "\n  "); p; p = strstr(p + 1, "\n  ")) {
    const char *key = p + 3, *eq = strstr(key, " = "), *end = strstr(key, ",\n");
    CHECK(eq && end && eq < end, "moegen_config_to_lua wrote an odd line:\n%s", text);
    const char *value = eq + 3;
    int n = (int)(end - value);
    if (*value == '"') value++, n -= 2;
    char line[160];
    if (strncmp(key, "name = ", 7) == 0)
      snprintf(line, sizeof line, "name=%s", name);
    else
      snprintf(line, sizeof line, "%.*s=%.*s", (int)(eq - key), key, n, value);
    int rc = moegen_config_set(out, line, ++pos, &err);
    CHECK(rc == 0, "--set %s of a validated config fails: %s", line, err.msg);
  }
  CHECK(pos == MOEGEN_F_COUNT, "moegen_config_to_lua wrote %d keys, not %d", pos, MOEGEN_F_COUNT);
}

/* Renders c for arch (JIT mode: no compiler needed); checks that it renders. */
static void check_render(const moegen_config *c, const char *arch) {
  moegen_gen_options opt = {.name = "fuzz", .arch = arch, .compile = MOEGEN_COMPILE_JIT,
                            .command_line = "fuzz_config"};
  moegen_sources src;
  moegen_error err = {0};
  int rc = moegen_render(c, &opt, &src, &err);
  if (rc == 0) moegen_sources_free(&src);
  CHECK(rc == 0, "a validated config does not render for %s: %s", arch, err.msg);
}

/* Whether the config printed as `text` was seen before (a table of hashes,
 * overwritten on collisions: a repeat is rendered again at worst). */
static bool seen_before(const char *text) {
  static uint64_t seen[4096];
  uint64_t h = 1469598103934665603u;
  for (const char *p = text; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  h |= 1;
  uint64_t *slot = &seen[h % (sizeof seen / sizeof seen[0])];
  if (*slot == h) return true;
  *slot = h;
  return false;
}

/* Checks the invariants of a validated config c (see the file comment). */
static void check_valid(const moegen_config *c) {
  char *text = lua_text(c);
  moegen_config back;
  reload_lua(text, &back);
  CHECK(same_values(c, &back), "the printed config loads to another config:\n%s", text);
  char *again = lua_text(&back);
  CHECK(strcmp(text, again) == 0, "printing is not a fixed point:\n%s\nthen\n%s", text, again);
  free(again);
  set_keys(text, c->name, &back);
  CHECK(same_values(c, &back), "the config's keys as --set give another config:\n%s", text);
  if (!seen_before(text)) {
    check_render(c, "sm_90a");
    check_render(c, "sm_80");
  }
  free(text);
}

/* ---------------------------------------------------------------- the three kinds */

static const int file_codes[] = {EX_DATAERR, EX_CONFIG, EX_OSERR, 0};
static const int set_codes[] = {EX_USAGE, EX_DATAERR, EX_CONFIG, 0};
static const int preset_codes[] = {EX_USAGE, 0};
static const int validate_codes[] = {EX_CONFIG, EX_DATAERR, 0};

/* Loads the text as a file of the loader's kind onto c; 0 or the loader's
 * code, after the failure checks. */
static int load_file(moegen_config *c, const uint8_t *text, size_t len, bool lua) {
  const char *path = as_file(text, len);
  const char *wheres[] = {path, NULL};
  moegen_error err = {0};
  moegen_config before = *c;
  int rc = lua ? moegen_config_load_lua(c, path, &err) : moegen_config_load_hf(c, path, &err);
  if (rc) {
    check_failure(lua ? "moegen_config_load_lua" : "moegen_config_load_hf", rc, &err, file_codes,
                  wheres);
    CHECK(memcmp(&before, c, sizeof *c) == 0, "a failed load changed the config");
  }
  return rc;
}

/* Applies the text as a --set list onto c (see the file comment); stops at
 * the first failure, as the command line does. */
static int apply_sets(moegen_config *c, const uint8_t *text, size_t len) {
  char *copy = malloc(len + 1), *line = copy;
  CHECK(copy, "out of memory");
  memcpy(copy, text, len);
  copy[len] = 0;
  int rc = 0;
  for (int pos = 1; rc == 0 && line; pos++) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    moegen_error err = {0};
    if (line[0] == '@') {
      static const char *const wheres[] = {"unknown preset", NULL};
      rc = moegen_config_preset(c, line + 1, &err);
      if (rc) check_failure("moegen_config_preset", rc, &err, preset_codes, wheres);
    } else {
      static const char *const wheres[] = {"command-line argument ", NULL};
      rc = moegen_config_set(c, line, pos, &err);
      if (rc) check_failure("moegen_config_set", rc, &err, set_codes, wheres);
    }
    line = next;
  }
  free(copy);
  return rc;
}

/* One input (see the file comment); returns 0, aborts on a broken invariant. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int kind = data[0] == 'L' ? 0 : data[0] == 'J' ? 1 : data[0] == 'S' ? 2 : data[0] % 3;
  const uint8_t *text = data + 1;
  size_t len = size - 1;
  moegen_config c;
  moegen_config_defaults(&c);
  int rc = kind == 2 ? apply_sets(&c, text, len) : load_file(&c, text, len, kind == 0);
  if (rc) return 0;
  moegen_error err = {0};
  rc = moegen_config_validate(&c, &err);
  if (rc) {
    /* the origin of a field: a file, a pseudo file or a command-line argument */
    const char *wheres[] = {as_file("", 0), "<", "command-line argument ", NULL};
    check_failure("moegen_config_validate", rc, &err, validate_codes, wheres);
    return 0;
  }
  check_valid(&c);
  return 0;
}
