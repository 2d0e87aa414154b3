/* tests/unit/test_template.c -- the template engine (templates/engine.lua),
 * the sandbox (gen/sandbox.c) and the embed tool (gen/embed.c).
 *
 * The test carries its own embedded files (see template.cmake): engine.lua
 * and the files of tests/unit/template_fixtures, embedded by moegen_embed at
 * build time. TEMPLATE_TEST_SOURCE_DIR is the source tree, to compare with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "render.h"

static int failures;

/* Reports a failed check; returns `ok`. */
static int check(int ok, int line, const char *what, const char *detail) {
  if (!ok) {
    failures++;
    fprintf(stderr, "test_template.c:%d: FAILED %s%s%s\n", line, what, detail ? ": " : "",
            detail ? detail : "");
  }
  return ok;
}
#define CHECK(cond, detail) check((cond) != 0, __LINE__, #cond, (detail))

/* Returns the CPU seconds this process has used: the limits are counted in
 * VM instructions and bytes, so their cost is CPU time; wall time on a
 * shared 2-core CI machine also measures the other tests running beside. */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Renders `text` as template "t.lt"; returns the text (malloc'd) or NULL
 * with *rc and err set. */
static char *render(moegen_sandbox *sb, const char *text, int *rc, moegen_error *err) {
  char *out = NULL;
  *rc = moegen_sandbox_render(sb, "t.lt", text, &out, err);
  return out;
}

/* Checks that `text` renders to `want`. */
static void expect_text(moegen_sandbox *sb, const char *text, const char *want, int line) {
  moegen_error err = {0};
  int rc;
  char *out = render(sb, text, &rc, &err);
  check(rc == 0 && out, line, text, err.msg);
  if (out) check(strcmp(out, want) == 0, line, text, out);
  free(out);
}
#define EXPECT_TEXT(sb, text, want) expect_text((sb), (text), (want), __LINE__)

/* Checks that `text` fails with EX_SOFTWARE and a message that starts
 * with `prefix` and contains `part`; then that the sandbox still works. */
static void expect_error(moegen_sandbox *sb, const char *text, const char *prefix,
                         const char *part, int line) {
  moegen_error err = {0};
  int rc;
  char *out = render(sb, text, &rc, &err);
  check(rc == EX_SOFTWARE && !out && err.code == EX_SOFTWARE, line, text, "expected an error");
  check(strncmp(err.msg, prefix, strlen(prefix)) == 0, line, text, err.msg);
  check(strstr(err.msg, part) != NULL, line, text, err.msg);
  free(out);
  expect_text(sb, "ok <%= 1 + 1 %>", "ok 2", line);
}
#define EXPECT_ERROR(sb, text, prefix, part) expect_error((sb), (text), (prefix), (part), __LINE__)

/* ---------------------------------------------------------------- engine */

static void test_syntax(moegen_sandbox *sb) {
  EXPECT_TEXT(sb, "", "");
  EXPECT_TEXT(sb, "hello\nworld\n", "hello\nworld\n");
  EXPECT_TEXT(sb, "verbatim \"q\" 'q' \\ \\n %> < % -%> ?? \t\r\n", "verbatim \"q\" 'q' \\ \\n %> < % -%> ?? \t\r\n");
  EXPECT_TEXT(sb, "<% local x = 2 %>x=<%= x %>", "x=2");
  EXPECT_TEXT(sb, "<%= 1 + 2 %> <%= 'a' .. \"b\" %> <%= 1.5 %> <%= true %> <%= 7 // 2 %>",
              "3 ab 1.5 true 3");
  EXPECT_TEXT(sb, "a<%# a comment %>b<%#\nmulti\nline\n%>c", "abc");
  EXPECT_TEXT(sb, "<% if true then -%>\nyes\n<% end -%>\nend", "yes\nend");
  EXPECT_TEXT(sb, "a <%= 1 -%>\nb <%# c -%>\nc <% -%>\r\nd", "a 1b c d");
  EXPECT_TEXT(sb, "<% -%>x\n", "x\n"); /* '-%>' eats only a newline */
  EXPECT_TEXT(sb, "<% for i = 1, 3 do %><%= i %>,<% end %>", "1,2,3,");
  EXPECT_TEXT(sb, "<% for _, v in ipairs({'a', 'b'}) do -%>\n[<%= v %>]\n<% end -%>\n", "[a]\n[b]\n");
  EXPECT_TEXT(sb, "<%= \"it's \\\"q\\\"\" %>|<%= 'say \"hi\"' %>|<%= [[a\\b]] %>",
              "it's \"q\"|say \"hi\"|a\\b");
  EXPECT_TEXT(sb, "<% local s = \"%>\" %><%= s %>|<%= 'a%>b' %>|<% local l = [==[%>]==] %><%= l %>",
              "%>|a%>b|%>");
  EXPECT_TEXT(sb, "<% local s = \"\\\"%>\" %><%= s %>", "\"%>");
  EXPECT_TEXT(sb, "<% local x = 1 -- a note %><%= x %>|<%= x -- another -%>\nz", "1|1z");
  EXPECT_TEXT(sb, "<% --[[ %> ]] local y = 5 %><%= y %>", "5");
  EXPECT_TEXT(sb, "<%\nlocal a = 1\nlocal b = 2\n%><%= a +\n b %>", "3");
  EXPECT_TEXT(sb, "<% local function f(n) return n * 2 end %><%= f(21) %>", "42");
  EXPECT_TEXT(sb, "<%= ('abc'):upper() %> <%= string.format('%05.1f', 3.14159) %> <%= math.max(1, 9) %> "
                  "<%= table.concat({1, 2}, '+') %>",
              "ABC 003.1 9 1+2");
  EXPECT_TEXT(sb, "<%= select('#', 1, 2) %> <%= tonumber('0x10') %> <%= type(next) %>", "2 16 function");
}

static void test_errors(moegen_sandbox *sb) {
  EXPECT_ERROR(sb, "a\nb\n<% if then %>\n", "templates/t.lt:3:", "unexpected symbol");
  EXPECT_ERROR(sb, "x\n<%= nil + 1 %>", "templates/t.lt:2:", "attempt to perform arithmetic");
  EXPECT_ERROR(sb, "\n\n\n<%= missing %>", "templates/t.lt:4: <%= missing %> is nil", "");
  EXPECT_ERROR(sb, "<%= 'ok' %>\n<%=   cfgx   -%>\n", "templates/t.lt:2: <%= cfgx %> is nil", "");
  EXPECT_ERROR(sb, "<%= ({}).x\n %>", "templates/t.lt:1: <%= ({}).x %> is nil", "");
  EXPECT_ERROR(sb, "<%\n\n%>\n<%# \n\n %>\n<% if true then -%>\n<%= cfgx.y %>\n<% end %>", "templates/t.lt:8:",
               "global 'cfgx'");
  EXPECT_ERROR(sb, "1\n<% error('boom') %>", "templates/t.lt:2: boom", "");
  EXPECT_ERROR(sb, "<% error('no position', 0) %>", "templates/t.lt: no position", "");
  EXPECT_ERROR(sb, "<% error({}) %>", "templates/t.lt: (error object is a table value)", "");
  EXPECT_ERROR(sb, "a\n<% local s = 'x %>\n<% y = 1 %>", "templates/t.lt:2:", "unfinished string");
  EXPECT_ERROR(sb, "a\n<% local s = 'x%> %>\n", "templates/t.lt:2: unclosed <%", "");
  EXPECT_ERROR(sb, "a\nb <% x = 1\n", "templates/t.lt:2: unclosed <%", "");
  EXPECT_ERROR(sb, "a\n<%= 'never closed", "templates/t.lt:2: unclosed <%", "");
}

/* ---------------------------------------------------------------- sandbox */

static void test_escapes(moegen_sandbox *sb) {
  static const char *const absent[] = {
      "io", "os", "require", "load", "loadstring", "dofile", "loadfile", "rawset", "rawget",
      "rawequal", "rawlen", "setmetatable", "getmetatable", "debug", "package", "collectgarbage",
      "coroutine", "print", "pcall", "xpcall", "utf8", "_G", "string.dump", "('').dump",
      "math.random", "math.randomseed", NULL};
  static const char *const attempts[] = {
      "io.open('/etc/passwd')", "os.execute('true')", "os.exit(1)", "require('os')",
      "load('return 1')", "loadstring('return 1')", "dofile('/dev/null')",
      "loadfile('/dev/null')", "string.dump(function() end)", "('').dump(function() end)",
      "getmetatable('').__index.dump(function() end)", "rawset(_G, 'x', 1)",
      "rawset(_ENV, 'x', 1)", "_G.os.exit(1)", "debug.getinfo(1)", "collectgarbage('count')",
      "setmetatable({}, {})", "coroutine.create(function() end)", "package.loaded.os.exit(1)",
      "_ENV.io.write('x')", "print('x')", NULL};
  const char *const *p;
  char text[256];
  for (p = absent; *p; p++) {
    snprintf(text, sizeof text, "<%%= type(%s) %%>", *p);
    EXPECT_TEXT(sb, text, "nil");
  }
  for (p = attempts; *p; p++) {
    snprintf(text, sizeof text, "x\n<%% %s %%>", *p);
    EXPECT_ERROR(sb, text, "templates/t.lt:2:", "nil value");
  }
  /* Each call gets fresh libraries and globals: nothing a template assigns
   * reaches the next call. */
  EXPECT_TEXT(sb, "<% string.dump = 1 string.upper = nil math.pi = 3 x = 1 %><%= type(('').dump) %>",
              "number");
  EXPECT_TEXT(sb, "<%= type(('').dump) %> <%= ('a'):upper() %> <%= math.pi > 3 %> <%= type(x) %>",
              "nil A true nil");
  EXPECT_TEXT(sb, "<% local n = 0 for k in pairs(_ENV) do n = n + 1 end %><%= n %>", "3");
}

static void test_limits(void) {
  moegen_sandbox *sb = NULL;
  moegen_error err = {0};
  double t0, loop_s, bomb_s;
  int rc = moegen_sandbox_open(&sb, 0, 0, &err);
  if (!CHECK(rc == 0, err.msg)) return;
  /* The default cap (MOEGEN_SANDBOX_INSTRUCTIONS, 2e8) takes ~1.6 CPU s on
   * this machine; a sandbox with a tenth of it must stop ten times sooner. */
  t0 = now();
  EXPECT_ERROR(sb, "<% while true do end %>", "templates/t.lt:1: instruction limit exceeded (runaway loop?)", "");
  loop_s = now() - t0;
  CHECK(loop_s < 5.0, "runaway loop took too long");
  moegen_sandbox *small = NULL;
  if (CHECK(moegen_sandbox_open(&small, 0, MOEGEN_SANDBOX_INSTRUCTIONS / 10, &err) == 0, err.msg)) {
    t0 = now();
    EXPECT_ERROR(small, "<% while true do end %>",
                 "templates/t.lt:1: instruction limit exceeded (runaway loop?)", "");
    const double small_s = now() - t0;
    CHECK(small_s < 0.5 && small_s < loop_s / 3, "a tenth of the instruction cap did not stop sooner");
    moegen_sandbox_close(small);
  }
  t0 = now();
  EXPECT_ERROR(sb, "a\n<% local t = {} for i=1,1e9 do t[i] = string.rep(\"x\", 1000) end %>",
               "templates/t.lt: memory limit exceeded", "");
  bomb_s = now() - t0;
  CHECK(bomb_s < 2.0, "memory bomb took too long");
  EXPECT_ERROR(sb, "<% local s = string.rep('x', 1 << 30) %>", "templates/t.lt: memory limit exceeded", "");
  EXPECT_ERROR(sb, "<% local s = 'x' while true do s = s .. s end %>", "templates/t.lt: memory limit exceeded", "");
  printf("runaway loop stopped in %.3f s, memory bomb in %.3f s\n", loop_s, bomb_s);
  moegen_sandbox_close(sb);

  rc = moegen_sandbox_open(&sb, 0, 1000000, &err);
  if (!CHECK(rc == 0, err.msg)) return;
  EXPECT_ERROR(sb, "\n<% local function f() while true do end end %>\n<% f() %>",
               "templates/t.lt:2: instruction limit exceeded", "");
  EXPECT_TEXT(sb, "<% local n = 0 for i = 1, 10000 do n = n + i end %><%= n %>", "50005000");
  moegen_sandbox_close(sb);

  rc = moegen_sandbox_open(&sb, 1000, 0, &err); /* too small for a Lua state */
  CHECK(rc == EX_SOFTWARE && sb == NULL, err.msg);
  CHECK(strcmp(err.msg, "sandbox: memory limit exceeded") == 0, err.msg);
  rc = moegen_sandbox_open(&sb, 10000, 0, &err); /* too small for the engine */
  CHECK(rc == EX_SOFTWARE && sb == NULL, err.msg);
  CHECK(strcmp(err.msg, "templates/engine.lua: memory limit exceeded") == 0, err.msg);
}

static void test_include(moegen_sandbox *sb) {
  EXPECT_TEXT(sb, "[<%= include('include.txt') %>]", "[included \"text\"\nline 2\n]");
  EXPECT_TEXT(sb, "<%= #include('empty.txt') %>", "0");
  EXPECT_ERROR(sb, "\n<%= include('nope.cuh') %>", "templates/t.lt:2: no embedded file nope.cuh", "");
  EXPECT_ERROR(sb, "<%= include() %>", "templates/t.lt:1: bad argument #1 to 'include'", "");
}

static void test_globals(moegen_sandbox *sb) {
  moegen_config c;
  moegen_error err = {0};
  const char *const opt[] = {"name", "m1", "arch", "sm_90a", NULL};
  long v = 0;
  memset(&c, 0, sizeof c);
  strcpy(c.name, "tiny");
  c.experts = 64;
  c.topk = 6;
  c.score = MOEGEN_SCORE_SOFTMAX;
  c.pre_softmax = true;
  c.scaling = 2.5;
  c.logits_dtype = MOEGEN_DTYPE_FP32;
  c.dtype = MOEGEN_DTYPE_BF16;
  CHECK(moegen_sandbox_set_config(sb, &c, &err) == 0, err.msg);
  CHECK(moegen_sandbox_set_strings(sb, "opt", opt, &err) == 0, err.msg);
  EXPECT_TEXT(sb, "<%= cfg.name %> <%= cfg.experts %> <%= math.type(cfg.topk) %> <%= cfg.score %> "
                  "<%= cfg.pre_softmax %> <%= cfg.expert_bias %> <%= cfg.scaling %> <%= cfg.logits_dtype %> "
                  "<%= cfg.dtype %> <%= opt.name %> <%= opt.arch %>",
              "tiny 64 integer softmax true false 2.5 fp32 bf16 m1 sm_90a");

  CHECK(moegen_sandbox_run(sb, "p.lua", "local e = cfg.experts\nreturn { router = { threads = e * 2, f = 1.5 } }",
                           "plan", &err) == 0, err.msg);
  EXPECT_TEXT(sb, "<%= plan.router.threads %>", "128");
  CHECK(moegen_sandbox_get_int(sb, "plan.router.threads", &v, &err) == 0 && v == 128, err.msg);
  CHECK(moegen_sandbox_get_int(sb, "cfg.experts", &v, &err) == 0 && v == 64, err.msg);
  CHECK(moegen_sandbox_get_int(sb, "plan.router.f", &v, &err) == EX_SOFTWARE, "float");
  CHECK(strcmp(err.msg, "sandbox: plan.router.f: expected an integer, got a float") == 0, err.msg);
  CHECK(moegen_sandbox_get_int(sb, "plan.nope.x", &v, &err) == EX_SOFTWARE, "missing");
  CHECK(strcmp(err.msg, "sandbox: plan.nope.x: plan.nope is nil, not a table") == 0, err.msg);
  CHECK(moegen_sandbox_get_int(sb, "opt.name", &v, &err) == EX_SOFTWARE, "string");
  CHECK(strcmp(err.msg, "sandbox: opt.name: expected an integer, got string") == 0, err.msg);

  CHECK(moegen_sandbox_run(sb, "bad.lua", "x = 1", "plan", &err) == EX_SOFTWARE, "no table");
  CHECK(strcmp(err.msg, "templates/bad.lua: returned nil, not a table") == 0, err.msg);
  CHECK(moegen_sandbox_run(sb, "bad.lua", "\nreturn {", "plan", &err) == EX_SOFTWARE, "syntax");
  CHECK(strncmp(err.msg, "templates/bad.lua:2:", 20) == 0, err.msg);
  CHECK(moegen_sandbox_run(sb, "bad.lua", "\x1bLua", "plan", &err) == EX_SOFTWARE, "binary chunk");
  CHECK(moegen_sandbox_run(sb, "bad.lua", "while true do end", "plan", &err) == EX_SOFTWARE, "loop");
  CHECK(strstr(err.msg, "templates/bad.lua:1: instruction limit exceeded") == err.msg, err.msg);
  EXPECT_TEXT(sb, "<%= plan.router.threads %>", "128"); /* failed runs left plan alone */
}

/* ---------------------------------------------------------------- embed tool */

/* Reads file `rel` of the source tree into a malloc'd buffer. */
static char *read_source(const char *rel, size_t *size) {
  char path[1024];
  FILE *f;
  char *data;
  long n;
  snprintf(path, sizeof path, "%s/%s", TEMPLATE_TEST_SOURCE_DIR, rel);
  f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  data = malloc((size_t)n + 1);
  if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return data;
}

/* Checks that embedded file `name` holds exactly the bytes of `rel`. */
static void expect_embedded(const char *name, const char *rel) {
  const moegen_embedded_file *f = moegen_embedded_find(name);
  size_t size = 0;
  char *want = read_source(rel, &size);
  if (!CHECK(f != NULL, name) || !CHECK(want != NULL, rel)) return;
  CHECK(f->size == size && memcmp(f->data, want, size) == 0, name);
  CHECK(f->data[f->size] == '\0', name);
  free(want);
}

static void test_embed(void) {
  expect_embedded("embed_bytes.bin", "tests/unit/template_fixtures/embed_bytes.bin");
  expect_embedded("empty.txt", "tests/unit/template_fixtures/empty.txt");
  expect_embedded("include.txt", "tests/unit/template_fixtures/include.txt");
  expect_embedded("engine.lua", "templates/engine.lua");
  CHECK(moegen_embedded_find("nope") == NULL, "unknown name");
  CHECK(moegen_embedded_files[4].name == NULL, "terminator");
}

int main(void) {
  moegen_sandbox *sb = NULL;
  moegen_error err = {0};
  test_embed();
  if (!CHECK(moegen_sandbox_open(&sb, 0, 0, &err) == 0, err.msg)) return 1;
  test_syntax(sb);
  test_errors(sb);
  test_escapes(sb);
  test_include(sb);
  test_globals(sb);
  moegen_sandbox_close(sb);
  test_limits();
  if (failures) fprintf(stderr, "test_template: %d check(s) failed\n", failures);
  else printf("test_template: all checks passed\n");
  return failures ? 1 : 0;
}
