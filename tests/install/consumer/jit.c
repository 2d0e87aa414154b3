/* tests/install/consumer/jit.c -- the JIT path of an installed moegen: the
 * generator library builds a module in-process (moegen_config_defaults,
 * moegen_config_preset, moegen_jit for sm_90a, so no device is asked). The
 * module is created (or the runtime reports the missing driver or device)
 * and its image holds the preset; NVRTC compiles only at a kernel's first
 * use, which this program never reaches. Built by CMake (moegen::moegen_gen)
 * and by pkg-config (moegen); exit 0 ok, 1 not. */
#include <string.h>

#include "check.h"
#include "moegen/moegen.h"

int main(void) {
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  int rc = moegen_config_preset(&c, "qwen3-30b-a3b", &err);
  CHECK(rc == 0 && c.experts == 128 && c.topk == 8, "preset qwen3-30b-a3b: %d %s", rc, err.msg);
  moegen_module *m = NULL;
  moegen_status st = moegen_jit(&c, "sm_90a", &m, &err);
  CHECK(st == MOEGEN_OK || st == MOEGEN_ERR_NO_DRIVER || st == MOEGEN_ERR_NO_DEVICE,
        "moegen_jit: %s: %s", moegen_status_string(st), err.msg);
  const moegen_image *img = moegen_module_image(m);
  CHECK(img && img->router.experts == 128 && img->router.topk == 8 &&
            strcmp(img->arch, "sm_90a") == 0 && img->source_size > 0,
        "the JIT image does not hold the preset");
  moegen_module_destroy(m);
  return checks_done("jit_app");
}
