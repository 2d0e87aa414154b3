/* The AOT and the JIT image of every preset are the same, field for field
 * (CPU only; needs a C compiler, `cc` or $CC, to build the AOT text).
 *
 * For each preset and arch: moegen_generate writes NAME.c (the AOT image,
 * printed by the generator from the rendered structs), which is compiled
 * into a shared object and loaded; moegen_jit renders the same config into
 * its heap image (a driver is not needed: without one the module is still
 * created, unusable, and its image can be read). The two must agree on the
 * ABI version, the arch, the units and every plan field of moegen/abi.def.
 * The comparison itself is checked first: a copy of an image with any one
 * field changed must differ in exactly that field.
 *
 * Kernel selection (the JIT compiles a kernel a program): for each preset
 * at sm_90a and one at sm_80, the source preprocessed (`cpp`) with the
 * MOEGEN_UNIT / MOEGEN_KERNEL head of each kernel the image holds defines
 * exactly that kernel; the render-time check refuses a kernel outside its
 * own abi.want guard. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"
#include "moegen/moegen.h"
#include "runtime_check.h"


/* Every plan field planted with a difference is found, and only it. */
static void comparison_finds_plants(const moegen_image *img) {
  size_t n;
  const moegen_abi_field *f = moegen_abi_fields(&n);
  char why[256];
  CHECK(moegen_abi_image_diff(img, img, why, sizeof why) == 0, "an image differs from itself: %s", why);
  for (size_t i = 0; i < n; i++) {
    moegen_image copy = *img;
    int v = moegen_abi_get(&copy, &f[i]) + 1;
    memcpy((char *)&copy + f[i].offset, &v, sizeof v);
    int d = moegen_abi_image_diff(img, &copy, why, sizeof why);
    CHECK(d == 1 && !strncmp(why, f[i].path, strlen(f[i].path)),
          "planted +1 in %s: %d differences found (%s)", f[i].path, d, why);
  }
  moegen_image copy = *img;
  copy.units ^= 1u;
  CHECK(moegen_abi_image_diff(img, &copy, why, sizeof why) == 1, "planted units difference missed");
  printf("comparison: each of %zu planted field differences found\n", n);
}

/* The render-time signature check passes the rendered source and fails
 * (naming the kernel) where a kernel's parameters are swapped, a kernel is
 * missing, or a struct parameter's layout check is. */
static void signature_check(const moegen_image *img) {
  moegen_error err = {0};
  CHECK(moegen_abi_check_source(img->source, img, &err) == 0, "rendered source fails: %s", err.msg);
  static const char *const edits[][3] = {
      {"moegen_router_fwd(router::Outputs o, int T, int index_dtype, int qb_bins)",
       "moegen_router_fwd(router::Outputs o, int T, int qb_bins, int index_dtype)", "moegen_router_fwd"},
      {"moegen_sort_chunks(", "moegen_sort_chunks_gone(", "moegen_sort_chunks_gone"},
      {"extern \"C\" __global__ void __launch_bounds__(perm::GTHREADS, 3)\nmoegen_unpermute(",
       "__global__ void __launch_bounds__(perm::GTHREADS, 3)\nmoegen_unpermute(", "moegen_unpermute"},
      {"mirrors moegen_permute_rows_params", "mirrors nothing", "moegen_permute_rows"}};
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    const char *at = strstr(img->source, edits[i][0]);
    CHECK(at, "edit %zu: '%s' not in the source", i, edits[i][0]);
    if (!at) continue;
    size_t n = strlen(img->source), a = strlen(edits[i][0]), b = strlen(edits[i][1]);
    char *s = malloc(n + b + 1);
    memcpy(s, img->source, (size_t)(at - img->source));
    memcpy(s + (at - img->source), edits[i][1], b);
    strcpy(s + (at - img->source) + b, at + a);
    err.msg[0] = 0;
    int rc = moegen_abi_check_source(s, img, &err);
    CHECK(rc != 0 && strstr(err.msg, edits[i][2]), "edit %zu: check gave %d: %s", i, rc, err.msg);
    printf("planted signature fault %zu: %s\n", i, err.msg);
    free(s);
  }
}

/* Replaces the first `from` in text with `to` (malloc'd), or NULL if absent. */
static char *replaced(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) return NULL;
  size_t n = strlen(text), a = strlen(from), b = strlen(to);
  char *s = malloc(n - a + b + 1);
  memcpy(s, text, (size_t)(at - text));
  memcpy(s + (at - text), to, b);
  strcpy(s + (at - text) + b, at + a);
  return s;
}

/* The render-time check refuses moegen_sort_chunks in another kernel's
 * guard and without one. */
static void guard_check(const moegen_image *img) {
  size_t k = 0;
  while (k < moegen_abi_kernel_count && strcmp(moegen_abi_kernels[k].name, "moegen_sort_chunks")) k++;
  char guard[96], other[96];
  snprintf(guard, sizeof guard, "#if MOEGEN_WANT(%zu) // moegen_sort_chunks\n", k);
  snprintf(other, sizeof other, "#if MOEGEN_WANT(%zu) // moegen_sort_chunks\n", k - 1);
  const char *const to[] = {other, ""};
  for (int i = 0; i < 2; i++) {
    char *s = replaced(img->source, guard, to[i]);
    CHECK(s, "guard '%s' not in the source", guard);
    if (!s) return;
    moegen_error err = {0};
    int rc = moegen_abi_check_source(s, img, &err);
    CHECK(rc != 0 && strstr(err.msg, "moegen_sort_chunks"), "guard plant %d: check gave %d: %s", i,
          rc, err.msg);
    printf("planted guard fault %d: %s\n", i, err.msg);
    free(s);
  }
}

/* Each kernel img holds, and nothing else, survives the preprocessor with
 * its compile head (cpp -P; the same #if logic NVRTC applies). */
static void kernel_selection(const moegen_image *img, const char *dir, const char *what) {
  char path[4200];
  snprintf(path, sizeof path, "%s/select.cu", dir);
  FILE *f = fopen(path, "w");
  CHECK(f && fwrite(img->source, 1, img->source_size, f) == img->source_size && !fclose(f),
        "%s: cannot write %s", what, path);
  int kernels = 0;
  for (size_t k = 0; k < moegen_abi_kernel_count; k++) {
    int threads, smem;
    moegen_abi_kernel_shape(img, &moegen_abi_kernels[k], &threads, &smem);
    if (!threads) continue;
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "cpp -P -w -DMOEGEN_UNIT=%d -DMOEGEN_KERNEL=%zu '%s'",
             (int)moegen_abi_kernels[k].unit, k, path);
    FILE *p = popen(cmd, "r");
    char *out = NULL;
    size_t size = 0, used = 0, got;
    char buf[65536];
    while (p && (got = fread(buf, 1, sizeof buf, p)) > 0) {
      if (used + got + 1 > size) out = realloc(out, size = 2 * (used + got + 1));
      memcpy(out + used, buf, got);
      out[used += got] = 0;
    }
    CHECK(p && pclose(p) == 0 && out, "%s: %s failed", what, cmd);
    for (size_t j = 0; out && j < moegen_abi_kernel_count; j++) {
      char call[96];
      snprintf(call, sizeof call, "%s(", moegen_abi_kernels[j].name);
      int n = 0;
      for (const char *q = strstr(out, call); q; q = strstr(q + 1, call))
        n += q == out || !(q[-1] == '_' || (q[-1] >= 'a' && q[-1] <= 'z') || (q[-1] >= '0' && q[-1] <= '9'));
      CHECK(n == (j == k), "%s: MOEGEN_KERNEL=%zu (%s) defines %s %d times", what, k,
            moegen_abi_kernels[k].name, moegen_abi_kernels[j].name, n);
    }
    free(out);
    kernels++;
  }
  printf("%s: each of %d kernels alone in its selection\n", what, kernels);
}

/* Generates preset for arch as NAME.c in dir, compiles and loads it; the
 * AOT image, or NULL (a failure is counted). *lib: the loaded object. */
static const moegen_image *aot_image(const moegen_config *c, const char *arch, const char *name,
                                     const char *dir, void **lib) {
  moegen_gen_options opt = {.name = name, .arch = arch, .compile = MOEGEN_COMPILE_JIT,
                            .command_line = "test_image"};
  moegen_error err = {0};
  *lib = NULL;
  if (moegen_generate(c, &opt, dir, NULL, &err)) {
    CHECK(0, "%s %s: generate: %s", name, arch, err.msg);
    return NULL;
  }
  const char *src = getenv("MOEGEN_SOURCE_DIR"), *cc = getenv("CC"); /* ctest sets the first */
  char cmd[8192], so[4096], sym[128];
  snprintf(so, sizeof so, "%s/%s.so", dir, name);
  snprintf(cmd, sizeof cmd, "%s -std=c11 -Wall -Werror -shared -fPIC -I'%s/include' -I'%s' '%s/%s.c' -o '%s'",
           cc && *cc ? cc : "cc", src ? src : MOEGEN_SOURCE_DIR_DEFAULT, dir, dir, name, so);
  if (system(cmd) != 0) {
    CHECK(0, "%s %s: the AOT image text does not compile: %s", name, arch, cmd);
    return NULL;
  }
  *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  snprintf(sym, sizeof sym, "%s_image", name);
  const moegen_image *img = *lib ? dlsym(*lib, sym) : NULL;
  CHECK(img, "%s %s: %s not loadable: %s", name, arch, sym, dlerror());
  return img;
}

/* The preset with the overrides `sets` (NULL-terminated, or NULL) for
 * arch: its AOT and JIT images must agree; variant names the overrides in
 * the module name. */
static void compare_config(const char *preset, const char *const *sets, const char *variant,
                           const char *arch, const char *dir, int *planted,
                           const moegen_quant_plan *want_quant) {
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  int rc = moegen_config_preset(&c, preset, &err);
  for (int i = 0; !rc && sets && sets[i]; i++) rc = moegen_config_set(&c, sets[i], i + 1, &err);
  if (rc || moegen_config_validate(&c, &err)) {
    CHECK(0, "%s: %s", preset, err.msg);
    return;
  }
  char name[96];
  snprintf(name, sizeof name, "%s_%s%s", preset, arch, variant);
  for (char *p = name; *p; p++)
    if (*p == '-') *p = '_';
  void *lib;
  const moegen_image *aot = aot_image(&c, arch, name, dir, &lib);
  moegen_module *m = NULL;
  moegen_jit(&c, arch, &m, &err); /* NO_DRIVER without a GPU: the module still holds the image */
  const moegen_image *jit = moegen_module_image(m);
  CHECK(jit, "%s %s: moegen_jit gave no module: %s", preset, arch, err.msg);
  if (aot && jit) {
    if (!*planted) {
      comparison_finds_plants(jit);
      signature_check(jit);
      guard_check(jit);
      *planted = 1;
    }
    if (!sets && (!strcmp(arch, "sm_90a") || (!strcmp(arch, "sm_80") && !strcmp(preset, "deepseek-v3"))))
      kernel_selection(jit, dir, name);
    CHECK(jit->quant.recipe == want_quant->recipe &&
              jit->quant.grad_format == want_quant->grad_format &&
              jit->quant.scale_pow2 == want_quant->scale_pow2,
          "%s %s%s: quant plan %d %d %d, want %d %d %d", preset, arch, variant, jit->quant.recipe,
          jit->quant.grad_format, jit->quant.scale_pow2, want_quant->recipe,
          want_quant->grad_format, want_quant->scale_pow2);
    char why[256];
    int d = moegen_abi_image_diff(aot, jit, why, sizeof why);
    CHECK(d == 0, "%s %s: AOT and JIT images differ in %d fields, first %s", preset, arch, d, why);
    CHECK(!strcmp(aot->arch, jit->arch), "%s %s: arch %s vs %s", preset, arch, aot->arch, jit->arch);
    if (d == 0) printf("%s %s: AOT == JIT (units 0x%x)\n", preset, arch, jit->units);
  }
  moegen_module_destroy(m);
  if (lib) dlclose(lib);
}

int main(void) {
  char dir[] = "/tmp/moegen-test-image-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  static const char *const archs[] = {"sm_90a", "sm_80", "sm_75"};
  int planted = 0;
  const moegen_quant_plan bf16 = {0};
  for (const char *const *p = moegen_preset_names(); *p; p++)
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
      compare_config(*p, NULL, "", archs[a], dir, &planted, &bf16);
  /* The recipe reaches the image (moegen/abi.def's quant plan). */
  static const char *const block[] = {"recipe=fp8_block", NULL};
  static const char *const block_fp32[] = {"recipe=fp8_block", "fp8_scale=fp32", NULL};
  static const char *const tensorwise[] = {"recipe=fp8_tensorwise", NULL};
  static const char *const tensorwise_e4m3[] = {"recipe=fp8_tensorwise", "fp8_grad_format=e4m3",
                                                NULL};
  compare_config("deepseek-v3", block, "_block", "sm_90a", dir, &planted,
                 &(moegen_quant_plan){.recipe = MOEGEN_RECIPE_FP8_BLOCK, .grad_format = MOEGEN_FP8_E4M3, .scale_pow2 = 1});
  compare_config("deepseek-v3", block_fp32, "_block_fp32", "sm_80", dir, &planted,
                 &(moegen_quant_plan){.recipe = MOEGEN_RECIPE_FP8_BLOCK, .grad_format = MOEGEN_FP8_E4M3, .scale_pow2 = 0});
  compare_config("gpt-oss-120b", tensorwise, "_tw", "sm_90a", dir, &planted,
                 &(moegen_quant_plan){.recipe = MOEGEN_RECIPE_FP8_TENSORWISE, .grad_format = MOEGEN_FP8_E5M2, .scale_pow2 = 0});
  compare_config("gpt-oss-120b", tensorwise_e4m3, "_tw_e4m3", "sm_80", dir, &planted,
                 &(moegen_quant_plan){.recipe = MOEGEN_RECIPE_FP8_TENSORWISE, .grad_format = MOEGEN_FP8_E4M3, .scale_pow2 = 0});
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  printf("%s (%d failures)\n", check_failures ? "FAIL" : "PASS", check_failures);
  return check_failures ? 1 : 0;
}
