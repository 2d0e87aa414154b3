/* tests/install/consumer/aot.c -- the AOT path of an installed moegen: the
 * module consumer_moe (consumer_moe.lua with topk=4, generated at build
 * time) linked with the runtime only. Checks what needs no GPU: the module
 * is created (or the runtime reports the missing driver or device), its
 * image holds the config, the router's shapes follow from it. Built by
 * CMake (moegen_generate) and by pkg-config (moegen-rt); exit 0 ok, 1 not. */
#include "check.h"
#include "consumer_moe.h"

int main(void) {
  moegen_module *m = NULL;
  moegen_status st = consumer_moe_module_create(&m);
  CHECK(st == MOEGEN_OK || st == MOEGEN_ERR_NO_DRIVER || st == MOEGEN_ERR_NO_DEVICE,
        "consumer_moe_module_create: %s", moegen_status_string(st));
  const moegen_image *img = moegen_module_image(m);
  CHECK(img == &consumer_moe_image, "the module's image is not consumer_moe_image");
  CHECK(CONSUMER_MOE_EXPERTS == 16 && CONSUMER_MOE_TOPK == 4, "header: E %d, K %d",
        CONSUMER_MOE_EXPERTS, CONSUMER_MOE_TOPK);
  CHECK(consumer_moe_image.cubins == NULL && consumer_moe_image.source_size > 0,
        "a JIT image embeds the source and no cubins");
  moegen_router_fwd_shape sh;
  st = moegen_router_fwd_shape_of(&consumer_moe_image, 100, &sh);
  CHECK(st == MOEGEN_OK && sh.probs[0] == 100 && sh.probs[1] == 16 && sh.topk_indices[1] == 4,
        "router shapes: %s, probs [%lld, %lld], topk_indices [%lld, %lld]",
        moegen_status_string(st), (long long)sh.probs[0], (long long)sh.probs[1],
        (long long)sh.topk_indices[0], (long long)sh.topk_indices[1]);
  moegen_module_destroy(m);
  return checks_done("aot_app");
}
