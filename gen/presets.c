/* gen/presets.c -- built-in model presets (--preset NAME).
 *
 * Each preset holds exactly what moegen_config_load_hf reads from the
 * model's config.json in shared/models (tests/unit/test_config.c checks
 * that, field by field); routing facts per model are in SPEC.md section 7.
 * Every preset sets bf16 logits and bf16 activations, and recipe bf16
 * (with the FP8 sub-keys at their defaults), also where the model's file
 * carries a quantization_config (DeepSeek-V3: fp8_block).
 */
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "moegen/config.h"

typedef struct preset {
  const char *name;
  int experts, topk, hidden, ffn;
  moegen_score score;
  bool pre_softmax;
  int groups, group_topk;
  bool expert_bias;
  double scaling;
  int shared_experts;
  double aux_loss_coeff;
} preset;

#define SIGMOID MOEGEN_SCORE_SIGMOID
#define SOFTMAX MOEGEN_SCORE_SOFTMAX

/* name, E, K, H, F, score, pre_softmax, groups, group_topk, bias, scaling, shared, aux */
static const preset presets[] = {
    {"deepseek-v3", 256, 8, 7168, 2048, SIGMOID, false, 8, 4, true, 2.5, 1, 0.001},
    {"kimi-k2", 384, 8, 7168, 2048, SIGMOID, false, 0, 0, true, 2.827, 1, 0.0},
    {"qwen3-30b-a3b", 128, 8, 2048, 768, SOFTMAX, false, 0, 0, false, 1.0, 0, 0.001},
    {"qwen3-235b-a22b", 128, 8, 4096, 1536, SOFTMAX, false, 0, 0, false, 1.0, 0, 0.001},
    {"mixtral-8x7b", 8, 2, 4096, 14336, SOFTMAX, false, 0, 0, false, 1.0, 0, 0.02},
    {"gpt-oss-120b", 128, 4, 2880, 2880, SOFTMAX, false, 0, 0, false, 1.0, 0, 0.9},
    {"llama4-maverick", 128, 1, 5120, 8192, SIGMOID, false, 0, 0, false, 1.0, 1, 0.001},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const char *const preset_names[] = {
    "deepseek-v3",  "kimi-k2",      "qwen3-30b-a3b",   "qwen3-235b-a22b",
    "mixtral-8x7b", "gpt-oss-120b", "llama4-maverick", NULL};
_Static_assert(sizeof preset_names / sizeof preset_names[0] == N_PRESETS + 1,
               "preset_names lists every preset");

const char *const *moegen_preset_names(void) { return preset_names; }

static void copy_preset(moegen_config *c, const preset *p) {
  snprintf(c->name, sizeof c->name, "%s", p->name);
  c->experts = p->experts;
  c->topk = p->topk;
  c->hidden = p->hidden;
  c->ffn = p->ffn;
  c->score = p->score;
  c->pre_softmax = p->pre_softmax;
  c->groups = p->groups;
  c->group_topk = p->group_topk;
  c->expert_bias = p->expert_bias;
  c->scaling = p->scaling;
  c->logits_dtype = MOEGEN_DTYPE_BF16;
  c->dtype = MOEGEN_DTYPE_BF16;
  c->shared_experts = p->shared_experts;
  c->aux_loss_coeff = p->aux_loss_coeff;
  c->recipe = MOEGEN_RECIPE_BF16; /* a preset is the bf16 layer (DeepSeek-V3's file says fp8_block) */
  c->fp8_grad_format = MOEGEN_FP8_GRAD_HYBRID;
  c->fp8_scale = MOEGEN_FP8_SCALE_POW2;
}

int moegen_config_preset(moegen_config *c, const char *name, moegen_error *err) {
  for (size_t i = 0; i < N_PRESETS; i++) {
    if (strcmp(presets[i].name, name) != 0) continue;
    copy_preset(c, &presets[i]);
    for (int f = 0; f < MOEGEN_F_COUNT; f++) {
      snprintf(c->origin[f].file, sizeof c->origin[f].file, "<preset %s>", name);
      c->origin[f].line = 0;
    }
    return 0;
  }
  err->code = EX_USAGE;
  int n = snprintf(err->msg, sizeof err->msg, "unknown preset \"%.100s\" (known:", name);
  for (size_t i = 0; i < N_PRESETS; i++)
    n += snprintf(err->msg + n, sizeof err->msg - (size_t)n, "%s%s", i ? ", " : " ",
                  presets[i].name);
  snprintf(err->msg + n, sizeof err->msg - (size_t)n, ")");
  return err->code;
}
