/* emit_kernel OUT SPEC: renders router spec SPEC (an index into
 * tests/gpu/router_specs.h) for sm_90a and writes the prelude and the router
 * unit of its kernel source to OUT as host C++ for tests/emu/warp_emu.h:
 * each one-in one-out inline PTX statement becomes EMU_ASM("op", out, in)
 * and each extern __shared__ array a pointer into emu_smem; the kernels are
 * emu_router_fwd and emu_router_fwd_small (C++ linkage); MOEGEN_EMU_SMALL
 * says whether the unit has the small-T kernel. */
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
    } else { /* kernels renamed: the runtime's moegen_router_fwd is linked too */
      char *k = strstr(line, "extern \"C\" "), *n = strstr(line, "moegen_router_fwd");
      if (k) memmove(k, k + 11, strlen(k + 11) + 1);
      n = strstr(line, "moegen_router_fwd");
      if (n) fprintf(f, "%.*semu%s", (int)(n - line), line, n + strlen("moegen"));
      else fputs(line, f);
    }
    s += len;
  }
  return 0;
}

int main(int argc, char **argv) {
  int i = argc == 3 ? atoi(argv[2]) : -1;
  if (i < 0 || (size_t)i >= ROUTER_SPECS) {
    fprintf(stderr, "usage: emit_kernel OUT SPEC (0..%zu)\n", ROUTER_SPECS - 1);
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
  const char *router = strstr(src.cu, "MOEGEN_UNIT == 0 // router\n");
  /* The unit's own #endif: the last one before the next unit (or the end);
   * the kernels' abi.want guards close inside it. */
  const char *next = router ? strstr(router, "#if !defined(MOEGEN_UNIT)") : NULL, *stop = NULL;
  for (const char *e = router ? strstr(router, "\n#endif") : NULL; e && (!next || e < next);
       e = strstr(e + 1, "\n#endif"))
    stop = e;
  FILE *f = fopen(argv[1], "w");
  int rc = !unit || !stop || !f;
  if (!rc) {
    router = strchr(router, '\n') + 1;
    fprintf(f, "// %s, rendered by tests/emu/emit_kernel.c for the warp emulation\n",
            router_specs[i].what);
    rc = write_host(f, src.cu, (size_t)(unit - src.cu)) ||
         write_host(f, router, (size_t)(stop + 1 - router));
    fprintf(f, "#define MOEGEN_EMU_SMALL %d /* the unit has the small-T kernel */\n",
            src.image.router_small.threads > 0);
  }
  if (f && fclose(f)) rc = 1;
  moegen_sources_free(&src);
  if (rc) fprintf(stderr, "emit_kernel: spec %d: cannot rewrite the kernel source into %s\n", i, argv[1]);
  return rc;
}
