/* emit_kernel OUT SPEC: renders router spec SPEC (an index into
 * tests/gpu/router_specs.h) for sm_90a and writes the prelude and the router
 * unit of its kernel source to OUT as host C++ for tests/emu/warp_emu.h:
 * each one-in one-out inline PTX statement becomes EMU_ASM("op", out, in)
 * and each extern __shared__ array a pointer into emu_smem; the kernels are
 * emu_router_fwd and emu_router_fwd_small (C++ linkage); MOEGEN_EMU_SMALL
 * says whether the unit has the small-T kernel.
 * emit_kernel OUT bwd: the router backward kernel (emu_router_bwd) of each
 * spec of BWD_SPECS, once per router_bwd mode, each with the prelude in a
 * namespace emu_bwd_S_M (S the spec, M the mode's value), and
 * EMU_BWD_KERNELS(X) listing them as X(S, M). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moegen/moegen.h"
#include "router_specs.h"

/* Appends n bytes of s to f, rewriting the lines the host cannot compile. */
static int write_host(FILE *f, const char *s, size_t n) {
  const char *end = s + n;
  while (s < end) {
    const char *eol = memchr(s, '\n', (size_t)(end - s));
    size_t len = eol ? (size_t)(eol - s) + 1 : (size_t)(end - s);
    char line[1024];
    if (len >= sizeof line) return -1;
    memcpy(line, s, len);
    line[len] = 0;
    char *a = strstr(line, "asm(\""), *x = strstr(line, "extern __shared__ ");
    if (a) { /* asm("OP %0, %1;" : "=c"(OUT) : "c"(IN)); */
      char op[64], out[128], in[128];
      if (sscanf(a, "asm(\"%63s %%0, %%1;\" : \"=%*c\"(%127[^)]) : \"%*c\"(%127[^)]));", op, out, in) != 3)
        return -1;
      fprintf(f, "%.*sEMU_ASM(\"%s\", %s, %s);\n", (int)(a - line), line, op, out, in);
    } else if (x) { /* extern __shared__ [__align__(N) ]TYPE NAME[]; */
      char *t = x + strlen("extern __shared__ ");
      if (!strncmp(t, "__align__(", 10)) t = strchr(t, ')') + 2;
      char *br = strstr(t, "[];"), *sp = br;
      if (!br) return -1;
      while (sp > t && sp[-1] != ' ') sp--;
      fprintf(f, "%.*s%.*s *%.*s = reinterpret_cast<%.*s *>(emu_smem);\n", (int)(x - line), line,
              (int)(sp - 1 - t), t, (int)(br - sp), sp, (int)(sp - 1 - t), t);
    } else { /* kernels renamed: the runtime's moegen_router_fwd / _bwd are linked too */
      char *k = strstr(line, "extern \"C\" "), *n;
      if (k) memmove(k, k + 11, strlen(k + 11) + 1);
      n = strstr(line, "moegen_router_");
      if (n) fprintf(f, "%.*semu%s", (int)(n - line), line, n + strlen("moegen"));
      else fputs(line, f);
    }
    s += len;
  }
  return 0;
}

/* The router specs whose backward test_router_bwd_emu runs: every score
 * function (pre and post softmax), groups, bias, scaling, the three logits
 * dtypes, E = 1, 7, 8, 33, 130, K = E and K = 32. */
static const int bwd_specs[] = {0, 2, 3, 4, 5, 6, 8, 9, 12, 13, 14};

/* The body of the unit block of cu whose guard line ends in `header`: from
 * after that line to the block's own #endif (the last one before the next
 * unit, or the end; the kernels' abi.want guards close inside it), without
 * it: [*from, *to). */
static int unit_text(const char *cu, const char *header, const char **from, const char **to) {
  const char *u = strstr(cu, header);
  const char *next = u ? strstr(u, "#if !defined(MOEGEN_UNIT)") : NULL, *stop = NULL;
  for (const char *e = u ? strstr(u, "\n#endif") : NULL; e && (!next || e < next);
       e = strstr(e + 1, "\n#endif"))
    stop = e;
  if (!u || !stop) return -1;
  *from = strchr(u, '\n') + 1;
  *to = stop + 1;
  return 0;
}

/* emit_kernel OUT bwd (see the header). */
static int emit_bwd(const char *out) {
  FILE *f = fopen(out, "w");
  if (!f) return 1;
  int rc = 0;
  fprintf(f, "// router backward kernels, rendered by tests/emu/emit_kernel.c for the warp emulation\n");
  for (size_t j = 0; !rc && j < sizeof bwd_specs / sizeof bwd_specs[0]; j++)
    for (int mode = 0; !rc && mode < 2; mode++) {
      int i = bwd_specs[j];
      moegen_config c = config_of(&router_specs[i]);
      c.router_bwd = (moegen_router_bwd_mode)mode;
      moegen_error err = {0};
      moegen_gen_options opt = {.name = "emu", .arch = "sm_90a", .compile = MOEGEN_COMPILE_JIT,
                                .command_line = "emit_kernel"};
      moegen_sources src = {0};
      if (moegen_config_validate(&c, &err) || moegen_render(&c, &opt, &src, &err)) {
        fprintf(stderr, "emit_kernel: spec %d (%s): %s\n", i, router_specs[i].what, err.msg);
        rc = 1;
        break;
      }
      const char *prelude_end = strstr(src.cu, "#if !defined(MOEGEN_UNIT)"), *from, *to;
      rc = !prelude_end || unit_text(src.cu, "MOEGEN_UNIT == 1 // router_train\n", &from, &to);
      if (!rc) {
        fprintf(f, "namespace emu_bwd_%d_%d { // %s, router_bwd = %s\n", i, mode,
                router_specs[i].what, moegen_router_bwd_name(c.router_bwd));
        rc = write_host(f, src.cu, (size_t)(prelude_end - src.cu)) ||
             write_host(f, from, (size_t)(to - from));
        fprintf(f, "\n} // namespace emu_bwd_%d_%d\n", i, mode);
      }
      moegen_sources_free(&src);
    }
  fprintf(f, "#define EMU_BWD_KERNELS(X)");
  for (size_t j = 0; j < sizeof bwd_specs / sizeof bwd_specs[0]; j++)
    fprintf(f, " X(%d, 0) X(%d, 1)", bwd_specs[j], bwd_specs[j]);
  fprintf(f, "\n");
  if (fclose(f)) rc = 1;
  if (rc) fprintf(stderr, "emit_kernel: cannot write the backward kernels into %s\n", out);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[2], "bwd") == 0) return emit_bwd(argv[1]);
  int i = argc == 3 ? atoi(argv[2]) : -1;
  if (i < 0 || (size_t)i >= ROUTER_SPECS) {
    fprintf(stderr, "usage: emit_kernel OUT SPEC (0..%zu) | emit_kernel OUT bwd\n", ROUTER_SPECS - 1);
    return 64;
  }
  moegen_config c = config_of(&router_specs[i]);
  moegen_error err = {0};
  moegen_gen_options opt = {.name = "emu", .arch = "sm_90a", .compile = MOEGEN_COMPILE_JIT,
                            .command_line = "emit_kernel"};
  moegen_sources src = {0};
  if (moegen_config_validate(&c, &err) || moegen_render(&c, &opt, &src, &err)) {
    fprintf(stderr, "emit_kernel: spec %d (%s): %s\n", i, router_specs[i].what, err.msg);
    return 1;
  }
  const char *unit = strstr(src.cu, "#if !defined(MOEGEN_UNIT)"); /* the prelude ends here */
  const char *router, *stop;
  FILE *f = fopen(argv[1], "w");
  int rc = !unit || unit_text(src.cu, "MOEGEN_UNIT == 0 // router\n", &router, &stop) || !f;
  if (!rc) {
    fprintf(f, "// %s, rendered by tests/emu/emit_kernel.c for the warp emulation\n",
            router_specs[i].what);
    rc = write_host(f, src.cu, (size_t)(unit - src.cu)) ||
         write_host(f, router, (size_t)(stop - router));
    fprintf(f, "#define MOEGEN_EMU_SMALL %d /* the unit has the small-T kernel */\n",
            src.image.router_small.threads > 0);
  }
  if (f && fclose(f)) rc = 1;
  moegen_sources_free(&src);
  if (rc) fprintf(stderr, "emit_kernel: spec %d: cannot rewrite the kernel source into %s\n", i, argv[1]);
  return rc;
}
