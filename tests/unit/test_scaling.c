/* tests/unit/test_scaling.c -- scaling reaches the kernels as the float they
 * compute with (CPU only; NVRTC needs no GPU):
 *  - validation accepts exactly the values that round to a normal float
 *    (the extremes included) and rejects the rest, naming the range;
 *  - every SCALING literal of the rendered source reads back (strtof) to
 *    exactly (float)scaling, also where a 10-digit decimal would round to
 *    the neighbouring float;
 *  - the router units of the extreme values compile with NVRTC. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "moegen/moegen.h"
#include "runtime_check.h"
#include "shared.h"

/* The largest double that rounds to FLT_MAX (the midpoint above it rounds
 * to infinity) and the smallest that rounds to FLT_MIN (the midpoint below
 * it rounds to FLT_MIN, whose mantissa is even). */
#define LARGEST_ACCEPTED nextafter((double)FLT_MAX + 0x1p103, 0)
#define SMALLEST_ACCEPTED ((double)FLT_MIN - 0x1p-150)

static void config_with(moegen_config *c, double scaling) {
  moegen_error err = {0};
  moegen_config_defaults(c);
  CHECK(moegen_config_preset(c, "kimi-k2", &err) == 0, "preset: %s", err.msg);
  c->scaling = scaling;
}

/* Every SCALING literal in cu equals want bit for bit; returns how many there are. */
static int check_literals(const char *cu, float want, double scaling) {
  int n = 0;
  for (const char *p = cu; (p = strstr(p, "float SCALING = ")) != NULL; n++) {
    p += strlen("float SCALING = ");
    char *end;
    float got = strtof(p, &end);
    CHECK(end > p && *end == 'f' && end[1] == ';', "literal %.40s is not a float literal", p);
    CHECK(memcmp(&got, &want, sizeof got) == 0,
          "scaling %.17g: literal %.*s reads back as %a, want %a", scaling, (int)(end - p + 1), p,
          (double)got, (double)want);
  }
  return n;
}

/* Renders scaling for sm_90a, checks the literals and (compile) compiles
 * the router units with NVRTC. */
static void render_and_compile(double scaling, int compile) {
  moegen_config c;
  moegen_error err = {0};
  config_with(&c, scaling);
  int rc = moegen_config_validate(&c, &err);
  CHECK(rc == 0, "scaling %.17g rejected: %s", scaling, err.msg);
  if (rc) return;
  moegen_gen_options opt = {.name = "scaling", .arch = "sm_90a", .compile = MOEGEN_COMPILE_NVRTC,
                            .command_line = "test_scaling"};
  moegen_sources src;
  rc = moegen_render(&c, &opt, &src, &err);
  CHECK(rc == 0, "render scaling %.17g: %s", scaling, err.msg);
  if (rc) return;
  CHECK(check_literals(src.cu, (float)scaling, scaling) == 2,
        "scaling %.17g: want a SCALING literal in router and router_bwd", scaling);
  static const moegen_unit units[] = {MOEGEN_UNIT_ROUTER, MOEGEN_UNIT_ROUTER_TRAIN};
  for (size_t i = 0; compile && i < sizeof units / sizeof units[0]; i++) {
    size_t n;
    char *text = moegen_unit_source(src.cu, strlen(src.cu), units[i], &n);
    unsigned char *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    moegen_status st = moegen_nvrtc_compile(text, n, "scaling.cu", "sm_90a", 0, &cubin, &size, &log);
    CHECK(st == MOEGEN_OK, "scaling %.17g, %s unit: NVRTC %s\n%s", scaling,
          moegen_unit_name(units[i]), moegen_status_string(st), log ? log : "");
    if (st == MOEGEN_OK) printf("ok   scaling %.17g: %s unit compiles\n", scaling, moegen_unit_name(units[i]));
    free(cubin);
    free(log);
    free(text);
  }
  moegen_sources_free(&src);
}

int main(void) {
  static const double rejected[] = {1e39, 1e-50, 1e-320, 1e-39, (double)FLT_MIN / 2,
                                    (double)FLT_MAX + 0x1p103, nextafter(SMALLEST_ACCEPTED, 0)};
  for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
    moegen_config c;
    moegen_error err = {0};
    config_with(&c, rejected[i]);
    int rc = moegen_config_validate(&c, &err);
    CHECK(rc == EX_CONFIG && strstr(err.msg, "scaling: must round to a normal float "
                                             "(1.17549435e-38 to 3.40282347e+38"),
          "scaling %.17g: rc %d: %s", rejected[i], rc, err.msg);
  }
  /* The range the message names is accepted, ends included. */
  const double accepted[] = {LARGEST_ACCEPTED,  (double)FLT_MAX, 3.40282347e+38, SMALLEST_ACCEPTED,
                             (double)FLT_MIN,   1.17549435e-38,  2.5,            0.1,
                             nextafter(1 + 0x1p-24, 0)}; /* 10 digits: 1.000000060, the next float */
  int compile = !nvrtc_missing("test_scaling compiles");
  for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
    render_and_compile(accepted[i], compile && (i == 0 || i == 3));
  return check_result("test_scaling");
}
