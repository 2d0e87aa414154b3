/* tests/unit/test_config.c -- configuration input (gen/config.c,
 * gen/hf_config.c, gen/presets.c), on the CPU:
 *  - the key table, the defaults, every preset validates;
 *  - the HF config.json of each preset's model loads to exactly the preset;
 *  - NaN/Infinity in HF files, malformed JSON and Lua, wrong types, unknown
 *    keys and sandbox limits give FILE:LINE messages and the right code;
 *  - every validation rule rejects, naming the field and its FILE:LINE;
 *  - key=value overrides; to_lua -> load_lua round trips;
 *  - the precision recipe: its sub-keys, its validation rules and the HF
 *    quantization_config that sets it (test_recipe). 
 * Environment: MOEGEN_SOURCE_DIR (fixtures in tests/unit/configs, the models'
 * config.json copies in tests/data/models). Optional argument: the moegen binary,
 * whose --help must list every config key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "moegen/config.h"
#include "runtime_check.h"

static char fixtures[4096], models[4096];

/* ---------------------------------------------------------------- helpers */

/* Writes text to a new temporary file ending in suffix; returns its path
 * (static buffer, valid until the next call). */
static const char *temp_file(const char *text, const char *suffix) {
  static char path[4096];
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(path, sizeof path, "%s/moegen_test_config_XXXXXX%s", dir, suffix);
  int fd = mkstemps(path, (int)strlen(suffix));
  if (fd < 0) return NULL;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? path : NULL;
}

/* Whether every value field of a and b is equal; prints the first that differs. */
static int same_values(const moegen_config *a, const moegen_config *b, const char *what) {
  const char *bad = NULL;
  if (strcmp(a->name, b->name) != 0) bad = "name";
  else if (a->experts != b->experts) bad = "experts";
  else if (a->topk != b->topk) bad = "topk";
  else if (a->hidden != b->hidden) bad = "hidden";
  else if (a->ffn != b->ffn) bad = "ffn";
  else if (a->score != b->score) bad = "score";
  else if (a->pre_softmax != b->pre_softmax) bad = "pre_softmax";
  else if (a->groups != b->groups) bad = "groups";
  else if (a->group_topk != b->group_topk) bad = "group_topk";
  else if (a->expert_bias != b->expert_bias) bad = "expert_bias";
  else if (memcmp(&a->scaling, &b->scaling, sizeof a->scaling) != 0) bad = "scaling";
  else if (a->logits_dtype != b->logits_dtype) bad = "logits_dtype";
  else if (a->dtype != b->dtype) bad = "dtype";
  else if (a->shared_experts != b->shared_experts) bad = "shared_experts";
  else if (memcmp(&a->aux_loss_coeff, &b->aux_loss_coeff, sizeof(double)) != 0)
    bad = "aux_loss_coeff";
  else if (a->quantile_balancing != b->quantile_balancing) bad = "quantile_balancing";
  else if (a->recipe != b->recipe) bad = "recipe";
  else if (a->fp8_grad_format != b->fp8_grad_format) bad = "fp8_grad_format";
  else if (a->fp8_scale != b->fp8_scale) bad = "fp8_scale";
  else if (a->router_bwd != b->router_bwd) bad = "router_bwd";
  CHECK(!bad, "%s: %s differs", what, bad);
  return !bad;
}

/* Checks that rc/err is the error `code` whose message contains `want`. */
static void expect_error(int rc, const moegen_error *err, int code, const char *want,
                         const char *what) {
  CHECK(rc == code && err->code == code, "%s: rc %d (err.code %d), want %d; msg: %s", what, rc,
        err->code, code, err->msg);
  CHECK(strstr(err->msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err->msg, want);
}

static void preset(moegen_config *c, const char *name) {
  moegen_error err = {0};
  moegen_config_defaults(c);
  int rc = moegen_config_preset(c, name, &err);
  CHECK(rc == 0, "preset %s: %s", name, err.msg);
}

/* ---------------------------------------------------------------- keys, defaults, presets */

static void test_keys(void) {
  for (int f = 0; f < MOEGEN_F_COUNT; f++) {
    const char *k = moegen_config_key_name((moegen_field)f);
    CHECK(k && *k && moegen_config_key_type((moegen_field)f) &&
              moegen_config_key_help((moegen_field)f),
          "field %d has no key, type or help", f);
    for (int g = 0; k && g < f; g++)
      CHECK(strcmp(k, moegen_config_key_name((moegen_field)g)) != 0, "key %s twice", k);
  }
  CHECK(moegen_config_key_name(MOEGEN_F_COUNT) == NULL, "key name past the end");
  CHECK(strcmp(moegen_config_key_name(MOEGEN_F_GROUP_TOPK), "group_topk") == 0, "group_topk");
  CHECK(strcmp(moegen_score_name(MOEGEN_SCORE_SQRTSOFTPLUS), "sqrtsoftplus") == 0, "score name");
  CHECK(strcmp(moegen_dtype_name(MOEGEN_DTYPE_FP16), "fp16") == 0, "dtype name");
  CHECK(strcmp(moegen_router_bwd_name(MOEGEN_ROUTER_BWD_RECOMPUTE), "recompute") == 0 &&
            strcmp(moegen_router_bwd_name((moegen_router_bwd_mode)2), "?") == 0,
        "router_bwd name");
  CHECK(strcmp(moegen_config_key_type(MOEGEN_F_ROUTER_BWD), "saved|recompute") == 0,
        "router_bwd type text %s", moegen_config_key_type(MOEGEN_F_ROUTER_BWD));
}

static void test_defaults(void) {
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  CHECK(c.topk == 1 && c.score == MOEGEN_SCORE_SOFTMAX && c.scaling == 1.0 && c.groups == 0 &&
            c.dtype == MOEGEN_DTYPE_BF16 && c.router_bwd == MOEGEN_ROUTER_BWD_SAVED,
        "defaults");
  CHECK(strcmp(c.origin[MOEGEN_F_TOPK].file, "<default>") == 0, "default origin");
  expect_error(moegen_config_validate(&c, &err), &err, EX_CONFIG,
               "<default>: experts: must be in 1..2048, got 0 (not set)", "defaults");
}

static void test_presets(void) {
  int n = 0;
  for (const char *const *p = moegen_preset_names(); *p; p++, n++) {
    moegen_config c;
    moegen_error err = {0};
    preset(&c, *p);
    CHECK(moegen_config_validate(&c, &err) == 0, "preset %s: %s", *p, err.msg);
    CHECK(strcmp(c.name, *p) == 0, "preset %s names itself %s", *p, c.name);
    CHECK(c.logits_dtype == MOEGEN_DTYPE_BF16 && c.dtype == MOEGEN_DTYPE_BF16, "%s dtypes", *p);
    CHECK(c.recipe == MOEGEN_RECIPE_BF16 && c.fp8_grad_format == MOEGEN_FP8_GRAD_HYBRID &&
              c.fp8_scale == MOEGEN_FP8_SCALE_POW2,
          "%s recipe", *p);
    char want[300];
    snprintf(want, sizeof want, "<preset %s>", *p);
    for (int f = 0; f < MOEGEN_F_COUNT; f++)
      CHECK(strcmp(c.origin[f].file, want) == 0 && c.origin[f].line == 0, "%s origin %d", *p, f);
  }
  CHECK(n == 7, "%d presets", n);
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  expect_error(moegen_config_preset(&c, "gpt-5", &err), &err, EX_USAGE,
               "unknown preset \"gpt-5\" (known: deepseek-v3, kimi-k2", "unknown preset");
}

/* ---------------------------------------------------------------- HF config.json */

/* Every preset equals what its model's config.json loads to, but for the
 * recipe of DeepSeek-V3's file (its quantization_config: fp8_block; the
 * preset is the bf16 layer). */
static void test_hf_models(void) {
  for (const char *const *p = moegen_preset_names(); *p; p++) {
    char path[4500];
    snprintf(path, sizeof path, "%s/%s.json", models, *p);
    moegen_config want, got;
    moegen_error err = {0};
    preset(&want, *p);
    moegen_config_defaults(&got);
    int rc = moegen_config_load_hf(&got, path, &err);
    CHECK(rc == 0, "%s: %s", path, err.msg);
    if (rc) continue;
    if (strcmp(*p, "deepseek-v3") == 0) {
      CHECK(got.recipe == MOEGEN_RECIPE_FP8_BLOCK, "%s: recipe %d", path, (int)got.recipe);
      CHECK(got.origin[MOEGEN_F_RECIPE].line == 24, "%s: recipe line %d", path,
            got.origin[MOEGEN_F_RECIPE].line);
      want.recipe = MOEGEN_RECIPE_FP8_BLOCK;
    }
    same_values(&got, &want, *p);
    CHECK(moegen_config_validate(&got, &err) == 0, "%s: %s", path, err.msg);
    CHECK(strcmp(got.origin[MOEGEN_F_EXPERTS].file, path) == 0 &&
              got.origin[MOEGEN_F_EXPERTS].line > 1,
          "%s: experts origin %s:%d", *p, got.origin[MOEGEN_F_EXPERTS].file,
          got.origin[MOEGEN_F_EXPERTS].line);
    static const moegen_field from_file[] = {MOEGEN_F_NAME, MOEGEN_F_EXPERTS, MOEGEN_F_TOPK,
                                             MOEGEN_F_HIDDEN, MOEGEN_F_FFN, MOEGEN_F_SCORE,
                                             MOEGEN_F_GROUPS, MOEGEN_F_SCALING};
    for (size_t i = 0; i < sizeof from_file / sizeof from_file[0]; i++)
      CHECK(strcmp(got.origin[from_file[i]].file, path) == 0, "%s: field %s not from the file",
            *p, moegen_config_key_name(from_file[i]));
    for (int f = 0; f < MOEGEN_F_COUNT; f++)
      CHECK(strcmp(got.origin[f].file, path) == 0 || strcmp(got.origin[f].file, "<default>") == 0,
            "%s: field %s from %s", *p, moegen_config_key_name((moegen_field)f),
            got.origin[f].file);
  }
}

/* Specific origins: the line of the key that set each field. */
static void test_hf_origins(void) {
  char path[4500];
  snprintf(path, sizeof path, "%s/deepseek-v3.json", models);
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  CHECK(moegen_config_load_hf(&c, path, &err) == 0, "%s", err.msg);
  CHECK(c.origin[MOEGEN_F_EXPERTS].line == 9, "n_routed_experts line %d",
        c.origin[MOEGEN_F_EXPERTS].line);
  CHECK(c.origin[MOEGEN_F_SCORE].line == 15, "scoring_func line %d", c.origin[MOEGEN_F_SCORE].line);
  CHECK(c.origin[MOEGEN_F_EXPERT_BIAS].line == 14, "topk_method line %d",
        c.origin[MOEGEN_F_EXPERT_BIAS].line);
  snprintf(path, sizeof path, "%s/llama4-maverick.json", models);
  CHECK(moegen_config_load_hf(&c, path, &err) == 0, "%s", err.msg);
  CHECK(c.origin[MOEGEN_F_EXPERTS].line == 11 && c.origin[MOEGEN_F_SCORE].line == 5,
        "llama4 lines %d %d", c.origin[MOEGEN_F_EXPERTS].line, c.origin[MOEGEN_F_SCORE].line);
}

static void test_hf_nonfinite(void) {
  char path[4500];
  snprintf(path, sizeof path, "%s/hf_nonfinite.json", fixtures);
  moegen_config c, want;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  CHECK(moegen_config_load_hf(&c, path, &err) == 0, "%s", err.msg);
  preset(&want, "deepseek-v3");
  snprintf(want.name, sizeof want.name, "hf_nonfinite");
  same_values(&c, &want, "hf_nonfinite.json (no scoring_func: sigmoid)");
  CHECK(moegen_config_validate(&c, &err) == 0, "%s", err.msg);

  /* A NaN in a known real key loads, then fails validation at its line. */
  const char *p = temp_file("{\"model_type\": \"kimi_k2\",\n \"n_routed_experts\": 384,\n"
                            " \"num_experts_per_tok\": 8, \"hidden_size\": 7168,\n"
                            " \"moe_intermediate_size\": 2048,\n"
                            " \"routed_scaling_factor\": NaN}\n",
                            ".json");
  moegen_config_defaults(&c);
  CHECK(p && moegen_config_load_hf(&c, p, &err) == 0, "NaN scaling: %s", err.msg);
  char want_msg[4200];
  snprintf(want_msg, sizeof want_msg, "%s:5: scaling: must be finite", p);
  expect_error(moegen_config_validate(&c, &err), &err, EX_CONFIG, want_msg, "NaN scaling");
  unlink(p);
}

/* Loads the fixture or text (a temp .json file when text is set) and expects an error. */
static void expect_hf_error(const char *fixture, const char *text, int code, const char *want_fmt,
                            const char *what) {
  char path[4500], want[4600];
  const char *p = path;
  if (text)
    p = temp_file(text, ".json");
  else
    snprintf(path, sizeof path, "%s/%s", fixtures, fixture);
  snprintf(want, sizeof want, want_fmt, p);
  moegen_config c, before;
  moegen_error err = {0};
  preset(&c, "mixtral-8x7b");
  before = c;
  expect_error(moegen_config_load_hf(&c, p, &err), &err, code, want, what);
  CHECK(memcmp(&c, &before, sizeof c) == 0, "%s: a failed load changed the config", what);
  if (text) unlink(p);
}

static void test_hf_errors(void) {
  expect_hf_error("hf_malformed.json", NULL, EX_DATAERR, "%s:4: json: ", "malformed JSON");
  expect_hf_error("hf_wrong_type.json", NULL, EX_DATAERR,
                  "%s:4: n_routed_experts: expected an integer", "wrong type");
  expect_hf_error("hf_unknown_model.json", NULL, EX_DATAERR,
                  "%s:3: model_type: unsupported model type \"bert\"", "unknown model_type");
  expect_hf_error("no_such_file.json", NULL, EX_NOINPUT, "%s: cannot read: ", "missing file");
  expect_hf_error(NULL, "[1, 2]\n", EX_DATAERR, "%s:1: json: the top level is not an object",
                  "array root");
  /* No model_type: architectures may name the family; nothing else is guessed. */
  expect_hf_error(NULL, "{\"hidden_size\": 1, \"num_local_experts\": 8}\n", EX_DATAERR,
                  "%s: model_type: missing, and there is no architectures; moegen does not guess "
                  "a model family (supported model_type values: deepseek_v2, deepseek_v3,",
                  "no model_type");
  expect_hf_error(NULL, "{\"architectures\": [\"BertModel\"], \"hidden_size\": 1}\n", EX_DATAERR,
                  "%s: model_type: missing, and architectures names no supported model; moegen",
                  "no model_type, unknown architectures");
  expect_hf_error(NULL, "{\"model_type\": 7}\n", EX_DATAERR, "%s:1: model_type: expected a string",
                  "model_type type");
  expect_hf_error(NULL,
                  "{\"model_type\": \"gpt_oss\",\n\"num_experts_per_tok\": 4,\n"
                  "\"experts_per_token\": 2}\n",
                  EX_DATAERR, "%s:3: experts_per_token: disagrees with num_experts_per_tok",
                  "alias disagreement");
  expect_hf_error(NULL, "{\"model_type\": \"deepseek_v3\",\n\"routed_scaling_factor\": \"2.5\"}\n",
                  EX_DATAERR, "%s:2: routed_scaling_factor: expected a number", "real type");
  expect_hf_error(NULL, "{\"model_type\": \"qwen3_moe\",\n\"norm_topk_prob\": 1}\n", EX_DATAERR,
                  "%s:2: norm_topk_prob: expected a boolean", "bool type");
  expect_hf_error(NULL, "{\"model_type\": \"deepseek_v3\",\n\"scoring_func\": \"relu\"}\n",
                  EX_CONFIG, "%s:2: scoring_func: unsupported score function \"relu\"",
                  "scoring_func");
  expect_hf_error(NULL,
                  "{\"model_type\": \"deepseek_v3\", \"num_experts_per_tok\": 8,\n"
                  "\"norm_topk_prob\": false}\n",
                  EX_CONFIG, "%s:2: norm_topk_prob: false is not supported with sigmoid",
                  "sigmoid without renormalization");
  /* DeepSeek-V3's router scores a group by its 2 best experts, TE by its best
   * K/group_topk: groups that matter must have K = 2 * topk_group. */
  expect_hf_error(NULL,
                  "{\"model_type\": \"deepseek_v3\", \"n_routed_experts\": 64,\n"
                  "\"num_experts_per_tok\": 8, \"n_group\": 8,\n\"topk_group\": 2}\n",
                  EX_CONFIG,
                  "%s:3: topk_group: 2 with n_group 8 and num_experts_per_tok 8 is not supported: "
                  "deepseek_v3 scores an expert group by the sum of its 2 best scores",
                  "deepseek_v3 group score");
  expect_hf_error(NULL, "{\"model_type\": \"llama4\",\n\"text_config\": []}\n", EX_DATAERR,
                  "%s:2: text_config: expected an object", "text_config type");
  expect_hf_error(NULL, "{\"model_type\": \"mixtral\",\n\"hidden_size\": NaN}\n", EX_DATAERR,
                  "%s:2: hidden_size: expected an integer", "NaN integer");
  /* A key twice in one object is an error naming the key and the second line,
   * in a nested object too; the same key in two objects is not. */
  expect_hf_error(NULL,
                  "{\"model_type\": \"mixtral\",\n\"hidden_size\": 4096,\n\"num_local_experts\": 8,\n"
                  "\"hidden_size\": 5120}\n",
                  EX_DATAERR, "%s:4: hidden_size: duplicate key (a JSON object names each key once)",
                  "duplicate key");
  expect_hf_error(NULL,
                  "{\"model_type\": \"llama4\",\n\"text_config\": {\"model_type\": \"llama4_text\",\n"
                  "  \"model_type\": \"llama4_text\"}}\n",
                  EX_DATAERR, "%s:3: model_type: duplicate key", "nested duplicate key");
  expect_hf_error(NULL, "{\"model_type\": \"mixtral\",\n\"x\": NaN,\n\"x\": Infinity}\n", EX_DATAERR,
                  "%s:3: x: duplicate key", "duplicate key after a NaN");
  /* A size the file lacks (and no earlier source set) fails validation naming
   * the file, not "<default>"; one an earlier source set keeps its origin. */
  const char *p = temp_file("{\"model_type\": \"mixtral\",\n\"num_local_experts\": 8,\n"
                            "\"num_experts_per_tok\": 2,\n\"intermediate_size\": 64}\n",
                            ".json");
  char want[4600];
  snprintf(want, sizeof want, "%s: hidden: must be > 0, got 0", p);
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  CHECK(p && moegen_config_load_hf(&c, p, &err) == 0, "missing hidden_size: %s", err.msg);
  expect_error(moegen_config_validate(&c, &err), &err, EX_CONFIG, want, "missing hidden_size");
  preset(&c, "mixtral-8x7b");
  CHECK(moegen_config_load_hf(&c, p, &err) == 0, "missing hidden_size: %s", err.msg);
  CHECK(c.hidden == 4096 && strcmp(c.origin[MOEGEN_F_HIDDEN].file, "<preset mixtral-8x7b>") == 0,
        "hidden %d from %s", c.hidden, c.origin[MOEGEN_F_HIDDEN].file);
  if (p) unlink(p);
  /* A long file name becomes the name cut at a UTF-8 character boundary:
   * "moegen_test_config_XXXXXX" (25 bytes) and 12 of the 3-byte euro signs. */
  p = temp_file("{\"model_type\": \"mixtral\", \"num_local_experts\": 8, \"hidden_size\": 64,\n"
                "\"intermediate_size\": 64}\n",
                "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82"
                "\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac.json");
  moegen_config_defaults(&c);
  CHECK(p && moegen_config_load_hf(&c, p, &err) == 0 && strlen(c.name) == 61 &&
            moegen_config_validate(&c, &err) == 0,
        "long UTF-8 file name: name %s (%zu bytes): %s", c.name, strlen(c.name), err.msg);
  if (p) unlink(p);
}

/* Family facts beyond the seven files: Qwen3's norm_topk_prob default (false,
 * as in transformers) means pre-softmax; architectures stand in for model_type;
 * aliases; config.json names the config after its model_type. */
static void test_hf_families(void) {
  moegen_config c;
  moegen_error err = {0};
  const char *p = temp_file("{\"model_type\": \"qwen3_moe\", \"num_experts\": 64}\n", ".json");
  moegen_config_defaults(&c);
  CHECK(p && moegen_config_load_hf(&c, p, &err) == 0, "qwen3: %s", err.msg);
  CHECK(c.pre_softmax && c.score == MOEGEN_SCORE_SOFTMAX && c.experts == 64, "qwen3 default");
  unlink(p);
  p = temp_file("{\"architectures\": [\"X\", \"DeepseekV3ForCausalLM\"],\n"
                "\"num_routed_experts\": 64, \"num_shared_experts\": 2,\n"
                "\"n_group\": 1, \"topk_group\": 1, \"topk_method\": \"greedy\"}\n",
                ".json");
  moegen_config_defaults(&c);
  CHECK(p && moegen_config_load_hf(&c, p, &err) == 0, "architectures: %s", err.msg);
  CHECK(c.score == MOEGEN_SCORE_SIGMOID && c.experts == 64 && c.shared_experts == 2 &&
            c.groups == 0 && c.group_topk == 0 && !c.expert_bias,
        "deepseek by architectures");
  CHECK(c.origin[MOEGEN_F_SCORE].line == 1, "architectures origin line");
  unlink(p);

  char dir[] = "/tmp/moegen_test_config_dirXXXXXX", path[64];
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("{\"model_type\": \"mixtral\", \"dtype\": \"float16\"}\n", f);
    fclose(f);
  }
  moegen_config_defaults(&c);
  CHECK(moegen_config_load_hf(&c, path, &err) == 0, "config.json: %s", err.msg);
  CHECK(strcmp(c.name, "mixtral") == 0 && c.dtype == MOEGEN_DTYPE_FP16, "config.json name %s",
        c.name);
  unlink(path);
  rmdir(dir);
}

/* The real files of the families without a preset (tests/data/models): each
 * loads to the routing of its transformers model (the keys that differ from
 * the defaults, as --set assignments) and validates. */
static void test_hf_model_files(void) {
  static const char *const cases[][2] = {
      /* softmax, top-6 of it, never renormalized, times routed_scaling_factor (1) */
      {"deepseek-v2-lite", "experts=64 topk=6 hidden=2048 ffn=1408 pre_softmax=true "
                           "shared_experts=2 aux_loss_coeff=0.001"},
      /* sigmoid + e_score_correction_bias, renormalized; n_group 1 is no groups */
      {"glm-4.5-air", "experts=128 topk=8 hidden=4096 ffn=1408 score=sigmoid expert_bias=true "
                      "shared_experts=1"},
      /* softmax over all, top-8, norm_topk_prob false; one shared expert */
      {"qwen2-57b-a14b", "experts=64 topk=8 hidden=3584 ffn=2560 pre_softmax=true "
                         "shared_experts=1 aux_loss_coeff=0.001"},
      {"olmoe-1b-7b-0924", "experts=64 topk=8 hidden=2048 ffn=1024 pre_softmax=true "
                           "aux_loss_coeff=0.01"},
      /* softmax over the top-8 logits */
      {"granite-3.0-1b-a400m-instruct", "experts=32 topk=8 hidden=1024 ffn=512"},
      {"llama4-scout", "experts=16 topk=1 hidden=5120 ffn=8192 score=sigmoid shared_experts=1 "
                       "aux_loss_coeff=0.001"},
      /* the keys in ffn_config; softmax over all, top-4, divided by their sum
       * (moe_normalize_expert_weights 1): the softmax over the top-4 logits */
      {"dbrx-instruct", "experts=16 topk=4 hidden=6144 ffn=10752"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[4500], sets[256], name[128];
    moegen_config got, want;
    moegen_error err = {0};
    snprintf(path, sizeof path, "%s/%s.json", models, cases[i][0]);
    snprintf(name, sizeof name, "name=%s", cases[i][0]);
    snprintf(sets, sizeof sets, "%s", cases[i][1]);
    moegen_config_defaults(&want);
    CHECK(moegen_config_set(&want, name, 0, &err) == 0, "%s: %s", name, err.msg);
    for (char *t = strtok(sets, " "); t; t = strtok(NULL, " "))
      CHECK(moegen_config_set(&want, t, 0, &err) == 0, "%s: %s", t, err.msg);
    moegen_config_defaults(&got);
    int rc = moegen_config_load_hf(&got, path, &err);
    CHECK(rc == 0, "%s: %s", path, err.msg);
    if (rc) continue;
    same_values(&got, &want, cases[i][0]);
    CHECK(moegen_config_validate(&got, &err) == 0, "%s: %s", path, err.msg);
    CHECK(strcmp(got.origin[MOEGEN_F_EXPERTS].file, path) == 0 &&
              got.origin[MOEGEN_F_EXPERTS].line > 1,
          "%s: experts origin %s:%d", cases[i][0], got.origin[MOEGEN_F_EXPERTS].file,
          got.origin[MOEGEN_F_EXPERTS].line);
  }
  /* Real files of routing moegen cannot compute are refused, with the reason. */
  expect_hf_error("../../data/models/deepseek-v2.json", NULL, EX_CONFIG,
                  "%s:22: topk_method: group_limited_greedy with num_experts_per_tok 6 and "
                  "topk_group 3 is not supported: deepseek_v2 scores an expert group by its best "
                  "score, moegen (like TE) by the sum of its best num_experts_per_tok/topk_group "
                  "= 2",
                  "DeepSeek-V2");
  expect_hf_error("../../data/models/phi-3.5-moe-instruct.json", NULL, EX_CONFIG,
                  "%s:8: model_type: \"phimoe\" is not supported: it routes with sparsemixer",
                  "Phi-3.5-MoE");
  expect_hf_error("../../data/models/ernie-4.5-21b-a3b.json", NULL, EX_CONFIG,
                  "%s:8: model_type: \"ernie4_5_moe\" is not supported: it selects experts by "
                  "softmax scores plus e_score_correction_bias",
                  "ERNIE-4.5-21B-A3B");
  /* A family moegen does not know (and no model_type): an error, no guess. */
  expect_hf_error("../../data/models/hunyuan-a13b-instruct.json", NULL, EX_DATAERR,
                  "%s: model_type: missing, and architectures names no supported model; moegen "
                  "does not guess a model family",
                  "Hunyuan-A13B");
}

/* Loads text as a temporary .json into c (from the defaults); returns the code. */
static int load_hf_text(moegen_config *c, const char *text, moegen_error *err) {
  const char *p = temp_file(text, ".json");
  moegen_config_defaults(c);
  int rc = p ? moegen_config_load_hf(c, p, err) : -1;
  if (p) unlink(p);
  return rc;
}

/* The routing rules of the families beyond their real files. */
static void test_hf_family_rules(void) {
  moegen_config c;
  moegen_error err = {0};
  /* deepseek_v2: greedy (the default) ignores the groups; group_limited_greedy
   * is taken when a group's best score is its best num_experts_per_tok/topk_group. */
  CHECK(load_hf_text(&c, "{\"model_type\": \"deepseek_v2\", \"num_experts_per_tok\": 6,\n"
                         "\"n_group\": 8, \"topk_group\": 3}\n", &err) == 0 &&
            c.groups == 0 && c.group_topk == 0 && c.pre_softmax && c.score == MOEGEN_SCORE_SOFTMAX,
        "deepseek_v2 greedy: %s", err.msg);
  CHECK(load_hf_text(&c, "{\"model_type\": \"deepseek_v2\", \"num_experts_per_tok\": 4,\n"
                         "\"n_group\": 8, \"topk_group\": 4, \"topk_method\": "
                         "\"group_limited_greedy\",\n\"routed_scaling_factor\": 16.0}\n", &err) == 0 &&
            c.groups == 8 && c.group_topk == 4 && c.pre_softmax && c.scaling == 16.0,
        "deepseek_v2 group_limited_greedy K = topk_group: %s", err.msg);
  expect_hf_error(NULL, "{\"model_type\": \"deepseek_v2\",\n\"norm_topk_prob\": true}\n", EX_CONFIG,
                  "%s:2: norm_topk_prob: true is not supported for deepseek_v2: transformers' "
                  "DeepseekV2Moe ignores it",
                  "deepseek_v2 norm_topk_prob");
  expect_hf_error(NULL, "{\"model_type\": \"deepseek_v2\",\n\"scoring_func\": \"sigmoid\"}\n",
                  EX_CONFIG,
                  "%s:2: scoring_func: \"sigmoid\" is not supported for deepseek_v2, which routes "
                  "by softmax",
                  "deepseek_v2 scoring_func");
  expect_hf_error(NULL, "{\"model_type\": \"deepseek_v2\",\n\"topk_method\": \"noaux_tc\"}\n",
                  EX_CONFIG,
                  "%s:2: topk_method: \"noaux_tc\" is not supported for deepseek_v2 (expected "
                  "greedy or group_limited_greedy)",
                  "deepseek_v2 topk_method");
  /* glm4_moe and deepseek_v3: a group scores its 2 best; groups that keep every
   * group do not matter. */
  CHECK(load_hf_text(&c, "{\"model_type\": \"glm4_moe\", \"num_experts_per_tok\": 4,\n"
                         "\"n_group\": 4, \"topk_group\": 2}\n", &err) == 0 &&
            c.groups == 4 && c.group_topk == 2 && c.expert_bias && c.score == MOEGEN_SCORE_SIGMOID,
        "glm4_moe K = 2 * topk_group: %s", err.msg);
  expect_hf_error(NULL, "{\"model_type\": \"glm4_moe\", \"num_experts_per_tok\": 8,\n"
                        "\"n_group\": 4, \"topk_group\": 2}\n", EX_CONFIG,
                  "%s:2: topk_group: 2 with n_group 4 and num_experts_per_tok 8 is not supported: "
                  "glm4_moe scores",
                  "glm4_moe group score");
  CHECK(load_hf_text(&c, "{\"model_type\": \"deepseek_v3\", \"num_experts_per_tok\": 8,\n"
                         "\"n_group\": 4, \"topk_group\": 4}\n", &err) == 0 &&
            c.groups == 4 && c.group_topk == 4,
        "deepseek_v3 every group kept: %s", err.msg);
  expect_hf_error(NULL, "{\"model_type\": \"glm4_moe\", \"num_experts_per_tok\": 8,\n"
                        "\"norm_topk_prob\": false}\n", EX_CONFIG,
                  "%s:2: norm_topk_prob: false is not supported with sigmoid", "glm4_moe norm");
  /* qwen2_moe: the shared expert follows shared_expert_intermediate_size
   * (Qwen2MoeConfig's default has one); norm_topk_prob true renormalizes. */
  CHECK(load_hf_text(&c, "{\"model_type\": \"qwen2_moe\"}\n", &err) == 0 && c.shared_experts == 1 &&
            c.pre_softmax,
        "qwen2_moe defaults: %s", err.msg);
  CHECK(load_hf_text(&c, "{\"model_type\": \"qwen2_moe\", \"shared_expert_intermediate_size\": 0,\n"
                         "\"norm_topk_prob\": true}\n", &err) == 0 &&
            c.shared_experts == 0 && !c.pre_softmax &&
            c.origin[MOEGEN_F_SHARED_EXPERTS].line == 1 && c.origin[MOEGEN_F_PRE_SOFTMAX].line == 2,
        "qwen2_moe no shared expert: %s", err.msg);
  expect_hf_error(NULL, "{\"model_type\": \"qwen2_moe\",\n\"shared_expert_intermediate_size\": -1}\n",
                  EX_DATAERR, "%s:2: shared_expert_intermediate_size: must be >= 0, got -1",
                  "qwen2_moe shared size");
  expect_hf_error(NULL, "{\"model_type\": \"qwen2_moe\",\n\"shared_expert_intermediate_size\": 1.5}\n",
                  EX_DATAERR, "%s:2: shared_expert_intermediate_size: expected an integer, got a real",
                  "qwen2_moe shared size type");
  /* olmoe: norm_topk_prob (default false) as for Qwen. */
  CHECK(load_hf_text(&c, "{\"model_type\": \"olmoe\", \"norm_topk_prob\": true}\n", &err) == 0 &&
            !c.pre_softmax && c.score == MOEGEN_SCORE_SOFTMAX,
        "olmoe norm_topk_prob: %s", err.msg);
  /* dbrx: the MoE keys in ffn_config; the top-K divided by its
   * moe_normalize_expert_weights-norm: 1 (the default) or null. */
  CHECK(load_hf_text(&c, "{\"model_type\": \"dbrx\", \"d_model\": 6144,\n"
                         "\"ffn_config\": {\"moe_num_experts\": 16, \"moe_top_k\": 4,\n"
                         "  \"ffn_hidden_size\": 10752, \"moe_loss_weight\": 0.05}}\n", &err) == 0 &&
            c.experts == 16 && c.topk == 4 && c.hidden == 6144 && c.ffn == 10752 &&
            c.aux_loss_coeff == 0.05 && !c.pre_softmax && c.score == MOEGEN_SCORE_SOFTMAX &&
            c.origin[MOEGEN_F_TOPK].line == 2 && moegen_config_validate(&c, &err) == 0,
        "dbrx: %s", err.msg);
  CHECK(load_hf_text(&c, "{\"model_type\": \"dbrx\",\n\"ffn_config\": {\"moe_normalize_expert_weights\":"
                         " 1.0}}\n", &err) == 0 && !c.pre_softmax &&
            c.origin[MOEGEN_F_PRE_SOFTMAX].line == 2,
        "dbrx L1: %s", err.msg);
  CHECK(load_hf_text(&c, "{\"model_type\": \"dbrx\",\n\"ffn_config\": {\"moe_normalize_expert_weights\":"
                         " null}}\n", &err) == 0 && c.pre_softmax,
        "dbrx no normalization: %s", err.msg);
  expect_hf_error(NULL, "{\"model_type\": \"dbrx\",\n\"ffn_config\": {\"moe_normalize_expert_weights\": 2}}\n",
                  EX_CONFIG,
                  "%s:2: moe_normalize_expert_weights: 2 is not supported: DBRX divides the top-K "
                  "weights by their 2-norm",
                  "dbrx L2");
  expect_hf_error(NULL, "{\"model_type\": \"dbrx\",\n\"ffn_config\": {\"moe_normalize_expert_weights\": \"1\"}}\n",
                  EX_DATAERR, "%s:2: moe_normalize_expert_weights: expected a number or null, got a string",
                  "dbrx norm type");
  expect_hf_error(NULL, "{\"model_type\": \"dbrx\",\n\"ffn_config\": 3}\n", EX_DATAERR,
                  "%s:2: ffn_config: expected an object, got an integer", "dbrx ffn_config type");
  /* Without model_type, an architectures entry names any family. */
  CHECK(load_hf_text(&c, "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"num_experts\": 60}\n",
                     &err) == 0 &&
            c.experts == 60 && c.shared_experts == 1 && c.pre_softmax,
        "qwen2_moe by architectures: %s", err.msg);
  /* Refused families, by model_type or by architectures. */
  expect_hf_error(NULL, "{\"model_type\": \"ernie4_5_moe\",\n\"moe_num_experts\": 64}\n", EX_CONFIG,
                  "%s:1: model_type: \"ernie4_5_moe\" is not supported: it selects experts by "
                  "softmax scores plus e_score_correction_bias",
                  "ernie4_5_moe");
  expect_hf_error(NULL, "{\"architectures\": [\"PhimoeForCausalLM\"],\n\"num_local_experts\": 16}\n",
                  EX_CONFIG, "%s:1: architectures: \"PhimoeForCausalLM\" is not supported: it routes "
                  "with sparsemixer",
                  "phimoe by architectures");
  expect_hf_error(NULL, "{\"model_type\": \"hunyuan_v1_moe\"}\n", EX_DATAERR,
                  "%s:1: model_type: unsupported model type \"hunyuan_v1_moe\" (supported: "
                  "deepseek_v2, deepseek_v3, kimi_k2, glm4_moe, qwen2_moe, qwen3_moe, olmoe, "
                  "mixtral, granitemoe, dbrx, gpt_oss, llama4, llama4_text)",
                  "unsupported family");
}

/* ---------------------------------------------------------------- Lua files */

static void test_lua_good(void) {
  char path[4500];
  snprintf(path, sizeof path, "%s/good.lua", fixtures);
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  CHECK(moegen_config_load_lua(&c, path, &err) == 0, "%s", err.msg);
  CHECK(moegen_config_validate(&c, &err) == 0, "%s", err.msg);
  CHECK(strcmp(c.name, "good") == 0 && c.experts == 128 && c.topk == 8 && c.hidden == 4096 &&
            c.ffn == 1536 && c.score == MOEGEN_SCORE_SQRTSOFTPLUS && c.groups == 8 &&
            c.group_topk == 4 && c.expert_bias && c.scaling == 2.5 &&
            c.logits_dtype == MOEGEN_DTYPE_FP32 && c.dtype == MOEGEN_DTYPE_FP16 &&
            c.shared_experts == 2 && c.aux_loss_coeff == 1e-3 && !c.pre_softmax,
        "good.lua values");
  CHECK(strcmp(c.origin[MOEGEN_F_EXPERTS].file, path) == 0 && c.origin[MOEGEN_F_EXPERTS].line == 5,
        "experts origin %s:%d", c.origin[MOEGEN_F_EXPERTS].file, c.origin[MOEGEN_F_EXPERTS].line);
  CHECK(c.origin[MOEGEN_F_AUX_LOSS_COEFF].line == 17, "aux origin line %d",
        c.origin[MOEGEN_F_AUX_LOSS_COEFF].line);
  CHECK(strcmp(c.origin[MOEGEN_F_PRE_SOFTMAX].file, "<default>") == 0, "untouched origin");
}

/* Loads a fixture (or text as a temp .lua file) and expects an error whose
 * message contains want_fmt with the path put in; the config must not change. */
static void expect_lua_error(const char *fixture, const char *text, int code, const char *want_fmt,
                             const char *what) {
  char path[4500], want[4600];
  const char *p = path;
  if (text)
    p = temp_file(text, ".lua");
  else
    snprintf(path, sizeof path, "%s/%s", fixtures, fixture);
  snprintf(want, sizeof want, want_fmt, p);
  moegen_config c, before;
  moegen_error err = {0};
  preset(&c, "deepseek-v3");
  before = c;
  expect_error(moegen_config_load_lua(&c, p, &err), &err, code, want, what);
  CHECK(memcmp(&c, &before, sizeof c) == 0, "%s: a failed load changed the config", what);
  if (text) unlink(p);
}

static void test_lua_errors(void) {
  expect_lua_error("malformed.lua", NULL, EX_DATAERR, "%s:4: '}' expected (to close '{' at line 1)",
                   "syntax error");
  expect_lua_error("no_such_file.lua", NULL, EX_NOINPUT, "%s: cannot read: ", "missing file");
  expect_lua_error(NULL, "local t = {}\nreturn { experts = t.x.y }\n", EX_DATAERR,
                   "%s:2: attempt to index a nil value", "runtime error");
  expect_lua_error(NULL, "\n\nerror('custom')\n", EX_DATAERR,
                   "%s:3: attempt to call a nil value (global 'error')", "no base library");
  expect_lua_error(NULL, "return { experts = 1 + {} }\n", EX_DATAERR,
                   "%s:1: attempt to perform arithmetic on a table value", "arithmetic");
  expect_lua_error(NULL, "return 42\n", EX_DATAERR,
                   "%s: the chunk must return a table of config keys, not a number value",
                   "not a table");
  expect_lua_error(NULL, "return {\n  experts = 8,\n  expert = 2,\n  bogus = 1,\n}\n", EX_DATAERR,
                   "%s:3: expert: unknown config key", "unknown key");
  expect_lua_error(NULL, "return { 256 }\n", EX_DATAERR, "%s: the returned table has a number key",
                   "array item");
  expect_lua_error(NULL, "return {\n  experts = \"many\",\n}\n", EX_DATAERR,
                   "%s:2: experts: expected an integer, got \"many\"", "wrong type");
  expect_lua_error(NULL, "return {\n  topk = 2.5,\n}\n", EX_DATAERR,
                   "%s:2: topk: expected an integer, got 2.5", "fractional integer");
  expect_lua_error(NULL, "return {\n  expert_bias = 1,\n}\n", EX_DATAERR,
                   "%s:2: expert_bias: expected a boolean (true or false), got 1", "bool type");
  expect_lua_error(NULL, "return {\n  scaling = '2',\n}\n", EX_DATAERR,
                   "%s:2: scaling: expected a number, got \"2\"", "number type");
  expect_lua_error(NULL, "return {\n  name = {},\n}\n", EX_DATAERR,
                   "%s:2: name: expected a string, got a table", "string type");
  expect_lua_error(NULL, "return {\n  score = \"relu\",\n}\n", EX_CONFIG,
                   "%s:2: score: unknown score function \"relu\"", "unknown score");
  expect_lua_error(NULL, "return {\n  dtype = \"fp8\",\n}\n", EX_CONFIG,
                   "%s:2: dtype: unknown dtype \"fp8\"", "unknown dtype");
  expect_lua_error(NULL, "return {\n  router_bwd = \"recomputed\",\n}\n", EX_CONFIG,
                   "%s:2: router_bwd: unknown router backward mode \"recomputed\" (expected "
                   "saved|recompute)", "unknown router_bwd");
  expect_lua_error(NULL, "return {\n  router_bwd = true,\n}\n", EX_DATAERR,
                   "%s:2: router_bwd: expected a string, got true", "router_bwd type");
  expect_lua_error(NULL,
                   "return {\n  name = string.rep('x', 64),\n}\n", EX_DATAERR,
                   "%s:2: attempt to index a nil value (global 'string')", "no string library");
  expect_lua_error(NULL,
                   "return {\n  name = "
                   "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',\n}\n",
                   EX_CONFIG, "%s:2: name: \"xxxx", "long name");
  expect_lua_error(NULL, "os.exit(3)\n", EX_DATAERR, "%s:1: attempt to index a nil value (global 'os')",
                   "no os");
  expect_lua_error(NULL, "return { experts = math.random(8) }\n", EX_DATAERR,
                   "%s:1: attempt to call a nil value (field 'random')", "no math.random");
  expect_lua_error(NULL, "local n = 0\nwhile true do\n  n = n + 1\nend\n", EX_DATAERR,
                   "instruction limit exceeded", "runaway loop");
  expect_lua_error(NULL, "local t = {}\nfor i = 1, 1e8 do t[i] = {} end\n", EX_DATAERR,
                   "%s: memory limit exceeded", "memory hog");
  expect_lua_error(NULL, "\x1bLua\x54\x00 binary", EX_DATAERR,
                   "attempt to load a binary chunk (mode is 't')", "binary chunk");
}

/* ---------------------------------------------------------------- validation rules */

typedef struct bad_case {
  const char *lines; /* config keys, one per line, after a valid base */
  int code;
  const char *want;  /* after "PATH:" */
} bad_case;

/* Base: E=64, K=8, H=F=128, sigmoid, no groups (lines 2..7 of the file);
 * each case's keys start at line 8 and override the base. */
static const bad_case bad_cases[] = {
    {"topk = 65,\n", EX_CONFIG, "8: topk: 65 exceeds the kernel limit of 32"},
    {"experts = 16, topk = 17,\n", EX_CONFIG, "8: topk: 17 exceeds experts (16)"},
    {"topk = 33,\n", EX_CONFIG, "8: topk: 33 exceeds the kernel limit of 32"},
    {"topk = 0,\n", EX_CONFIG, "8: topk: must be at least 1, got 0"},
    {"experts = 2049,\n", EX_CONFIG, "8: experts: must be in 1..2048, got 2049"},
    {"experts = 0,\n", EX_CONFIG, "8: experts: must be in 1..2048, got 0"},
    {"experts = -4,\n", EX_CONFIG, "8: experts: must be in 1..2048, got -4"},
    {"hidden = 0,\n", EX_CONFIG, "8: hidden: must be > 0, got 0"},
    {"ffn = -128,\n", EX_CONFIG, "8: ffn: must be > 0, got -128"},
    /* int plan fields and row sizes (gemm1's N = 2 * ffn; found by tests/fuzz) */
    {"hidden = 16777217,\n", EX_CONFIG, "8: hidden: 16777217 exceeds the kernel limit of 16777216"},
    {"ffn = 1073741824,\n", EX_CONFIG, "8: ffn: 1073741824 exceeds the kernel limit of 16777216"},
    {"groups = 6, group_topk = 2,\n", EX_CONFIG,
     "8: groups: experts (64) is not a multiple of groups (6)"},
    {"groups = 8, group_topk = 3,\n", EX_CONFIG,
     "8: group_topk: topk (8) is not a multiple of group_topk (3)"},
    {"groups = 2, group_topk = 4,\n", EX_CONFIG, "8: group_topk: 4 exceeds groups (2)"},
    {"groups = 32, group_topk = 2,\n", EX_CONFIG,
     "8: group_topk: topk/group_topk = 4 experts per kept group exceeds experts/groups = 2"},
    {"groups = 8,\n", EX_CONFIG, "8: groups: 8 needs group_topk > 0 (group_topk = 0)"},
    {"group_topk = 2,\n", EX_CONFIG, "8: group_topk: 2 needs groups > 0 (groups = 0)"},
    {"groups = -1,\n", EX_CONFIG, "8: groups: must be >= 0, got -1"},
    /* a group spreads over a power of two of lanes that divides its size:
     * 65 (odd) takes one lane, 332 = 4 * 83 at most 4 (found by tests/fuzz) */
    {"experts = 130, groups = 2, group_topk = 1,\n", EX_CONFIG,
     "8: groups: 65 experts a group do not fit the router: a group's lanes are the largest "
     "power of two that divides 65 and is at most 16 (a warp's 32 lanes over 2 group slots), "
     "so 1 lane of 65 experts, over the 64 a lane holds"},
    {"experts = 996, groups = 3, group_topk = 1,\n", EX_CONFIG,
     "8: groups: 332 experts a group do not fit the router: a group's lanes are the largest "
     "power of two that divides 332 and is at most 8 (a warp's 32 lanes over 4 group slots), "
     "so 4 lanes of 83 experts, over the 64 a lane holds"},
    {"score = \"softmax\",\n", EX_CONFIG, /* cites the bias, set on line 7 */
     "7: expert_bias: only valid with score = \"sigmoid\" or \"sqrtsoftplus\""},
    {"pre_softmax = true,\n", EX_CONFIG, "8: pre_softmax: only valid with score = \"softmax\""},
    {"scaling = 0,\n", EX_CONFIG, "8: scaling: must be > 0, got 0 (on 0, TE multiplies"},
    {"scaling = -1.5,\n", EX_CONFIG, "8: scaling: must be > 0, got -1.5"},
    {"scaling = 1/0,\n", EX_CONFIG, "8: scaling: must be finite, got inf"},
    {"scaling = 0/0,\n", EX_CONFIG, "8: scaling: must be finite"},
    {"scaling = 1e39,\n", EX_CONFIG,
     "8: scaling: must round to a normal float (1.17549435e-38 to 3.40282347e+38; the kernels "
     "compute in float), got 1e+39"},
    {"scaling = 1e-50,\n", EX_CONFIG, "8: scaling: must round to a normal float"},
    {"scaling = 1e-320,\n", EX_CONFIG, "8: scaling: must round to a normal float"},
    {"scaling = 1e-39,\n", EX_CONFIG, "8: scaling: must round to a normal float"},
    {"name = \"caf\\xe9\",\n", EX_DATAERR, "8: name: not valid UTF-8 (byte 0xe9 at offset 3)"},
    {"name = \"\\xc0\\xaf\",\n", EX_DATAERR, /* an overlong "/" */
     "8: name: not valid UTF-8 (byte 0xc0 at offset 0)"},
    {"name = \"a\\xed\\xa0\\x80\",\n", EX_DATAERR, /* a UTF-16 surrogate */
     "8: name: not valid UTF-8 (byte 0xed at offset 1)"},
    {"name = \"ab\\xe2\\x82\",\n", EX_DATAERR, /* cut short */
     "8: name: not valid UTF-8 (byte 0xe2 at offset 2)"},
    {"dtype = \"fp32\",\n", EX_CONFIG, "8: dtype: must be \"bf16\" or \"fp16\", got \"fp32\""},
    {"shared_experts = -1,\n", EX_CONFIG, "8: shared_experts: must be >= 0, got -1"},
    {"aux_loss_coeff = -0.5,\n", EX_CONFIG, "8: aux_loss_coeff: must be finite and >= 0"},
    {"name = \"a\\nb\",\n", EX_CONFIG, "8: name: \"a"},
    {"quantile_balancing = true, score = \"sqrtsoftplus\",\n", EX_CONFIG,
     "8: quantile_balancing: needs score = \"sigmoid\" (score is \"sqrtsoftplus\")"},
    {"quantile_balancing = true, expert_bias = false,\n", EX_CONFIG,
     "8: quantile_balancing: needs expert_bias = true"},
    {"quantile_balancing = true, groups = 8, group_topk = 4,\n", EX_CONFIG,
     "8: quantile_balancing: does not take group-limited routing (groups = 8, group_topk = 4)"},
    {"quantile_balancing = true, experts = 8,\n", EX_CONFIG,
     "8: quantile_balancing: needs topk < experts (it selects topk + 1; topk = 8, experts = 8)"},
    /* the precision recipe (base: H = F = 128) */
    {"recipe = \"fp8\",\n", EX_CONFIG,
     "8: recipe: unknown recipe \"fp8\" (expected bf16|fp8_tensorwise|fp8_block)"},
    {"recipe = 1,\n", EX_DATAERR, "8: recipe: expected a string, got 1"},
    {"fp8_grad_format = \"e5m2\",\n", EX_CONFIG,
     "8: fp8_grad_format: unknown gradient format \"e5m2\" (expected hybrid|e4m3)"},
    {"fp8_scale = \"ue8m0\",\n", EX_CONFIG,
     "8: fp8_scale: unknown scale format \"ue8m0\" (expected pow2|fp32)"},
    {"recipe = \"fp8_block\", hidden = 192,\n", EX_CONFIG,
     "8: hidden: 192 is not a multiple of 128, which recipe = \"fp8_block\" (set at "},
    {"recipe = \"fp8_block\",\nffn = 2880,\n", EX_CONFIG,
     "9: ffn: 2880 is not a multiple of 128, which recipe = \"fp8_block\" (set at "},
    {"recipe = \"fp8_block\", dtype = \"fp16\",\n", EX_CONFIG,
     "8: dtype: must be \"bf16\" with recipe = \"fp8_block\" (set at "},
    {"recipe = \"fp8_tensorwise\", dtype = \"fp16\",\n", EX_CONFIG,
     "8: dtype: must be \"bf16\" with recipe = \"fp8_tensorwise\""},
    {"fp8_grad_format = \"e4m3\",\n", EX_CONFIG,
     "8: fp8_grad_format: \"e4m3\" only applies to recipe = \"fp8_tensorwise\" (recipe is "
     "\"bf16\"); leave it at \"hybrid\""},
    {"recipe = \"fp8_block\",\nfp8_grad_format = \"e4m3\",\n", EX_CONFIG,
     "9: fp8_grad_format: \"e4m3\" only applies to recipe = \"fp8_tensorwise\" (recipe is "
     "\"fp8_block\" (set at "},
    {"fp8_scale = \"fp32\",\n", EX_CONFIG,
     "8: fp8_scale: \"fp32\" only applies to recipe = \"fp8_block\" (recipe is \"bf16\"); "
     "leave it at \"pow2\""},
    {"recipe = \"fp8_tensorwise\",\nfp8_scale = \"fp32\",\n", EX_CONFIG,
     "9: fp8_scale: \"fp32\" only applies to recipe = \"fp8_block\" (recipe is "
     "\"fp8_tensorwise\" (set at "},
};

static void test_validation(void) {
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    char text[1024], want[4200];
    snprintf(text, sizeof text,
             "return {\n  experts = 64,\n  topk = 8,\n  hidden = 128,\n  ffn = 128,\n"
             "  score = \"sigmoid\",\n  expert_bias = true,\n  %s}\n",
             bad_cases[i].lines);
    const char *p = temp_file(text, ".lua");
    moegen_config c;
    moegen_error err = {0};
    moegen_config_defaults(&c);
    int rc = p ? moegen_config_load_lua(&c, p, &err) : -1;
    if (rc == 0) rc = moegen_config_validate(&c, &err);
    snprintf(want, sizeof want, "%s:%s", p, bad_cases[i].want);
    expect_error(rc, &err, bad_cases[i].code, want, bad_cases[i].lines);
    unlink(p);
  }
  /* What stays valid: one group of all experts, K = E, the maxima. */
  moegen_config c;
  moegen_error err = {0};
  preset(&c, "deepseek-v3");
  c.groups = c.group_topk = 1;
  CHECK(moegen_config_validate(&c, &err) == 0, "groups 1/1: %s", err.msg);
  c.experts = 2048;
  c.topk = 32;
  c.groups = 32;
  c.group_topk = 16;
  c.hidden = c.ffn = MOEGEN_MAX_DIM;
  CHECK(moegen_config_validate(&c, &err) == 0, "E 2048 K 32 groups 32/16, H = F = 2^24: %s",
        err.msg);
  c.groups = c.group_topk = 2; /* 1024 experts a group over 16 lanes: 64 a lane */
  CHECK(moegen_config_validate(&c, &err) == 0, "E 2048 K 32 groups 2/2: %s", err.msg);
  c.groups = 32;
  c.group_topk = 16;
  c.groups = 64;
  expect_error(moegen_config_validate(&c, &err), &err, EX_CONFIG,
               "groups: 64 exceeds the 32 groups the router kernel supports", "groups > 32");
  c.experts = c.topk = 5;
  c.groups = c.group_topk = 0;
  CHECK(moegen_config_validate(&c, &err) == 0, "K = E: %s", err.msg);
  c.router_bwd = MOEGEN_ROUTER_BWD_RECOMPUTE;
  CHECK(moegen_config_validate(&c, &err) == 0, "router_bwd = recompute: %s", err.msg);
  c.router_bwd = (moegen_router_bwd_mode)2;
  expect_error(moegen_config_validate(&c, &err), &err, EX_DATAERR,
               "router_bwd: invalid enum value 2", "bad router_bwd enum");
  c.router_bwd = MOEGEN_ROUTER_BWD_SAVED;
  c.score = (moegen_score)7;
  expect_error(moegen_config_validate(&c, &err), &err, EX_DATAERR, "score: invalid enum value 7",
               "bad enum");
}

/* ---------------------------------------------------------------- key=value */

static void test_set(void) {
  moegen_config c;
  moegen_error err = {0};
  moegen_config_defaults(&c);
  static const char *const good[] = {
      "experts=64", "topk=4", "hidden=0x100", "ffn=512.0", "score=sqrtsoftplus",
      "pre_softmax=false", "expert_bias=true", "scaling=2.827", "logits_dtype=fp32",
      "dtype=fp16", "name=my model", "aux_loss_coeff=1e-3", "groups=8", "group_topk=2",
      "router_bwd=recompute"};
  for (int i = 0; i < (int)(sizeof good / sizeof good[0]); i++)
    CHECK(moegen_config_set(&c, good[i], i + 1, &err) == 0, "%s: %s", good[i], err.msg);
  CHECK(c.experts == 64 && c.topk == 4 && c.hidden == 256 && c.ffn == 512 &&
            c.score == MOEGEN_SCORE_SQRTSOFTPLUS && !c.pre_softmax && c.expert_bias &&
            c.scaling == 2.827 && c.logits_dtype == MOEGEN_DTYPE_FP32 &&
            c.dtype == MOEGEN_DTYPE_FP16 && strcmp(c.name, "my model") == 0 &&
            c.aux_loss_coeff == 1e-3 && c.groups == 8 && c.group_topk == 2 &&
            c.router_bwd == MOEGEN_ROUTER_BWD_RECOMPUTE,
        "set values");
  CHECK(strcmp(c.origin[MOEGEN_F_SCALING].file, "<command line>") == 0 &&
            c.origin[MOEGEN_F_SCALING].line == 8,
        "set origin %s:%d", c.origin[MOEGEN_F_SCALING].file, c.origin[MOEGEN_F_SCALING].line);
  CHECK(moegen_config_validate(&c, &err) == 0, "set config: %s", err.msg);
  CHECK(moegen_config_set(&c, "name=", 3, &err) == 0 && c.name[0] == 0, "empty name");
  CHECK(moegen_config_set(&c, "name=caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80", 3, &err) == 0 &&
            moegen_config_validate(&c, &err) == 0,
        "UTF-8 name: %s", err.msg);
  CHECK(moegen_config_set(&c, "expert_bias=false", 3, &err) == 0 && !c.expert_bias, "false");

  moegen_config before = c;
  expect_error(moegen_config_set(&c, "experts", 5, &err), &err, EX_USAGE,
               "command-line argument 5: expected key=value, got \"experts\"", "missing =");
  expect_error(moegen_config_set(&c, "expert=8", 6, &err), &err, EX_USAGE,
               "command-line argument 6: expert: unknown config key", "bad key");
  expect_error(moegen_config_set(&c, "=8", 6, &err), &err, EX_USAGE,
               "command-line argument 6: expected key=value, got \"=8\" (the key is empty)",
               "empty key");
  expect_error(moegen_config_set(&c, "experts=many", 7, &err), &err, EX_DATAERR,
               "command-line argument 7: experts: expected an integer, got \"many\"", "wrong type");
  expect_error(moegen_config_set(&c, "experts=", 7, &err), &err, EX_DATAERR,
               "command-line argument 7: experts: expected an integer, got \"\"", "empty value");
  expect_error(moegen_config_set(&c, "topk=1.5", 7, &err), &err, EX_DATAERR,
               "topk: expected an integer, got 1.5", "fraction");
  expect_error(moegen_config_set(&c, "topk=99999999999", 7, &err), &err, EX_DATAERR,
               "topk: expected an integer, got 99999999999", "int range");
  expect_error(moegen_config_set(&c, "expert_bias=yes", 8, &err), &err, EX_DATAERR,
               "expert_bias: expected a boolean (true or false), got \"yes\"", "bool");
  expect_error(moegen_config_set(&c, "scaling=2.5x", 8, &err), &err, EX_DATAERR,
               "scaling: expected a number, got \"2.5x\"", "number");
  expect_error(moegen_config_set(&c, "score=Softmax", 8, &err), &err, EX_CONFIG,
               "score: unknown score function \"Softmax\"", "score case");
  expect_error(moegen_config_set(&c, "router_bwd=", 8, &err), &err, EX_CONFIG,
               "command-line argument 8: router_bwd: unknown router backward mode \"\" (expected "
               "saved|recompute)", "empty router_bwd");
  expect_error(moegen_config_set(&c,
                                 "name=0123456789012345678901234567890123456789012345678901234567890123",
                                 9, &err),
               &err, EX_CONFIG, "command-line argument 9: name: \"", "long name");
  expect_error(moegen_config_set(&c, "name=caf\xe9", 9, &err), &err, EX_DATAERR,
               "command-line argument 9: name: not valid UTF-8 (byte 0xe9 at offset 3)", "UTF-8");
  CHECK(memcmp(&c, &before, sizeof c) == 0, "failed sets changed the config");
  CHECK(moegen_config_set(&c, "scaling=inf", 9, &err) == 0, "scaling=inf parses");
  expect_error(moegen_config_validate(&c, &err), &err, EX_CONFIG,
               "command-line argument 9: scaling: must be finite, got inf", "inf scaling");
}

/* ---------------------------------------------------------------- to_lua */

/* to_lua -> file -> load_lua onto the defaults gives c back, byte for byte. */
static void round_trip(const moegen_config *c, const char *what) {
  size_t n = moegen_config_to_lua(c, NULL, 0);
  char *text = malloc(n + 1);
  CHECK(text && moegen_config_to_lua(c, text, n + 1) == n && strlen(text) == n, "%s: length", what);
  if (!text) return;
  const char *p = temp_file(text, ".lua");
  moegen_config back;
  moegen_error err = {0};
  moegen_config_defaults(&back);
  CHECK(p && moegen_config_load_lua(&back, p, &err) == 0, "%s: %s\n%s", what, err.msg, text);
  same_values(&back, c, what);
  char again[2048];
  moegen_config_to_lua(&back, again, sizeof again);
  CHECK(strcmp(again, text) == 0, "%s: to_lua is not stable", what);
  if (p) unlink(p);
  free(text);
}

static void test_to_lua(void) {
  for (const char *const *p = moegen_preset_names(); *p; p++) {
    moegen_config c;
    preset(&c, *p);
    round_trip(&c, *p);
  }
  moegen_config c;
  moegen_config_defaults(&c);
  snprintf(c.name, sizeof c.name, "quote \" backslash \\ end");
  c.scaling = 1.0 / 3.0;
  c.aux_loss_coeff = 1e-300;
  c.experts = 2048;
  c.score = MOEGEN_SCORE_SQRTSOFTPLUS;
  c.logits_dtype = MOEGEN_DTYPE_FP16;
  c.router_bwd = MOEGEN_ROUTER_BWD_RECOMPUTE;
  round_trip(&c, "odd values");
  c.scaling = INFINITY;
  c.aux_loss_coeff = -INFINITY;
  round_trip(&c, "infinities");
  c.scaling = 1e22;
  c.aux_loss_coeff = 5e-324;
  round_trip(&c, "extremes");

  /* Truncation: snprintf semantics. */
  preset(&c, "kimi-k2");
  char small[16];
  size_t n = moegen_config_to_lua(&c, small, sizeof small);
  CHECK(n > sizeof small && strlen(small) == sizeof small - 1 &&
            strncmp(small, "return {\n", 9) == 0,
        "truncated output");
  char full[2048];
  moegen_config_to_lua(&c, full, sizeof full);
  CHECK(strstr(full, "  scaling = 2.827,\n") && strstr(full, "  experts = 384,\n") &&
            strstr(full, "  score = \"sigmoid\",\n") && strstr(full, "  aux_loss_coeff = 0.0,\n") &&
            strstr(full, "  router_bwd = \"saved\",\n"),
        "kimi-k2 text:\n%s", full);
}

/* ---------------------------------------------------------------- the recipe */

/* What each recipe accepts, the enum checks, the abi names, and the
 * quantization_config of a Hugging Face file. */
static void test_recipe(void) {
  moegen_config c;
  moegen_error err = {0};
  CHECK(strcmp(moegen_recipe_name(MOEGEN_RECIPE_FP8_TENSORWISE), "fp8_tensorwise") == 0 &&
            strcmp(moegen_fp8_grad_format_name(MOEGEN_FP8_GRAD_E4M3), "e4m3") == 0 &&
            strcmp(moegen_fp8_scale_name(MOEGEN_FP8_SCALE_FP32), "fp32") == 0 &&
            strcmp(moegen_recipe_name((moegen_recipe)3), "?") == 0,
        "recipe names");
  CHECK(strcmp(moegen_config_key_type(MOEGEN_F_RECIPE), "bf16|fp8_tensorwise|fp8_block") == 0 &&
            strcmp(moegen_config_key_type(MOEGEN_F_FP8_GRAD_FORMAT), "hybrid|e4m3") == 0 &&
            strcmp(moegen_config_key_type(MOEGEN_F_FP8_SCALE), "pow2|fp32") == 0,
        "recipe key types");
  CHECK(moegen_fp8_max(MOEGEN_FP8_E4M3) == 448 && moegen_fp8_max(MOEGEN_FP8_E5M2) == 57344 &&
            moegen_fp8_max(2) == 0,
        "fp8 max");
  /* accepted: each recipe with the sub-keys that apply to it, at any value */
  static const char *const good[][3] = {
      {"recipe=fp8_tensorwise", "fp8_grad_format=e4m3", "fp8_scale=pow2"},
      {"recipe=fp8_tensorwise", "fp8_grad_format=hybrid", "fp8_scale=pow2"},
      {"recipe=fp8_block", "fp8_grad_format=hybrid", "fp8_scale=fp32"},
      {"recipe=fp8_block", "fp8_grad_format=hybrid", "fp8_scale=pow2"},
      {"recipe=bf16", "fp8_grad_format=hybrid", "fp8_scale=pow2"}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    preset(&c, "deepseek-v3");
    for (int j = 0; j < 3; j++)
      CHECK(moegen_config_set(&c, good[i][j], j + 1, &err) == 0, "%s: %s", good[i][j], err.msg);
    CHECK(moegen_config_validate(&c, &err) == 0, "%s %s %s: %s", good[i][0], good[i][1],
          good[i][2], err.msg);
    round_trip(&c, good[i][0]);
  }
  CHECK(c.recipe == MOEGEN_RECIPE_BF16, "recipe=bf16 sets bf16");
  preset(&c, "gpt-oss-120b"); /* H = F = 2880: tensorwise takes it, fp8_block does not */
  CHECK(moegen_config_set(&c, "recipe=fp8_tensorwise", 1, &err) == 0 &&
            moegen_config_validate(&c, &err) == 0,
        "gpt-oss fp8_tensorwise: %s", err.msg);
  CHECK(moegen_config_set(&c, "recipe=fp8_block", 4, &err) == 0, "%s", err.msg);
  expect_error(moegen_config_validate(&c, &err), &err, EX_CONFIG,
               "<preset gpt-oss-120b>: hidden: 2880 is not a multiple of 128, which recipe = "
               "\"fp8_block\" (set by command-line argument 4) needs (its 1x128 row tiles and "
               "128x128 weight blocks)",
               "gpt-oss fp8_block");
  expect_error(moegen_config_set(&c, "recipe=FP8_BLOCK", 5, &err), &err, EX_CONFIG,
               "command-line argument 5: recipe: unknown recipe \"FP8_BLOCK\"", "recipe case");
  c.recipe = (moegen_recipe)3;
  expect_error(moegen_config_validate(&c, &err), &err, EX_DATAERR, "recipe: invalid enum value 3",
               "bad recipe enum");
  preset(&c, "qwen3-30b-a3b");
  c.fp8_scale = (moegen_fp8_scale)-1;
  expect_error(moegen_config_validate(&c, &err), &err, EX_DATAERR,
               "fp8_scale: invalid enum value -1", "bad scale enum");

  /* Hugging Face quantization_config */
  static const char head[] = "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 1024,\n"
                             "\"moe_intermediate_size\": 256,\n";
  char text[1024];
  snprintf(text, sizeof text, "%s\"quantization_config\": {\"quant_method\": \"fp8\",\n"
           "\"weight_block_size\": [128, 128]}}\n", head);
  CHECK(load_hf_text(&c, text, &err) == 0 && c.recipe == MOEGEN_RECIPE_FP8_BLOCK &&
            c.origin[MOEGEN_F_RECIPE].line == 3,
        "fp8 without fmt: %s (recipe %d)", err.msg, (int)c.recipe);
  snprintf(text, sizeof text, "%s\"quantization_config\": null}\n", head);
  CHECK(load_hf_text(&c, text, &err) == 0 && c.recipe == MOEGEN_RECIPE_BF16, "null: %s", err.msg);
  static const struct {
    const char *q;
    int code;
    const char *want;
  } bad[] = {
      {"{\"quant_method\": \"awq\", \"bits\": 4}", EX_CONFIG,
       "%s:3: quant_method: \"awq\" is not supported: moegen reads DeepSeek-V3's block FP8 only: "
       "quant_method \"fp8\", fmt \"e4m3\", weight_block_size [128, 128], activation_scheme "
       "\"dynamic\" (recipe fp8_block)"},
      {"{\"bits\": 4}", EX_CONFIG, "%s:3: quantization_config: has no quant_method; moegen reads"},
      {"{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", \"weight_block_size\": [128, 128]}",
       EX_CONFIG, "%s:3: fmt: \"e5m2\" is not supported"},
      {"{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\",\n"
       "\"weight_block_size\": [128, 128]}",
       EX_CONFIG, "%s:3: activation_scheme: \"static\" is not supported (fp8_block computes"},
      {"{\"quant_method\": \"fp8\"}", EX_CONFIG,
       "%s:3: quantization_config: has no weight_block_size (a per-tensor FP8 checkpoint)"},
      {"{\"quant_method\": \"fp8\",\n\"weight_block_size\": [64, 64]}", EX_CONFIG,
       "%s:4: weight_block_size: is not supported: moegen reads"},
      {"{\"quant_method\": \"fp8\",\n\"weight_block_size\": [128, 128, 1]}", EX_CONFIG,
       "%s:4: weight_block_size: is not supported"},
      {"{\"quant_method\": \"fp8\",\n\"weight_block_size\": [128, \"128\"]}", EX_DATAERR,
       "%s:4: weight_block_size: expected an array of integers, got a string"},
      {"{\"quant_method\": \"fp8\",\n\"weight_block_size\": 128}", EX_DATAERR,
       "%s:4: weight_block_size: expected an array, got an integer"},
      {"{\"quant_method\": 8}", EX_DATAERR, "%s:3: quant_method: expected a string, got an integer"},
      {"\"fp8\"", EX_DATAERR, "%s:3: quantization_config: expected an object, got a string"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "%s\"quantization_config\": %s}\n", head, bad[i].q);
    expect_hf_error(NULL, text, bad[i].code, bad[i].want, bad[i].q);
  }
}

/* ---------------------------------------------------------------- --help */

/* Whether word is in text as a list item: after a space, before ',', ' ',
 * '\n' or the end. */
static bool has_word(const char *text, const char *word) {
  size_t n = strlen(word);
  for (const char *p = strstr(text, word); p; p = strstr(p + 1, word))
    if (p > text && p[-1] == ' ' && strchr(", \n", p[n])) return true;
  return false;
}

/* moegen --help lists every config key of the table and every model_type
 * moegen_config_load_hf knows. */
static void test_help(const char *moegen) {
  char cmd[4200], buf[16384];
  snprintf(cmd, sizeof cmd, "'%s' --help", moegen);
  FILE *f = popen(cmd, "r");
  CHECK(f != NULL, "cannot run %s", cmd);
  if (!f) return;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  CHECK(pclose(f) == 0, "%s failed", cmd);
  for (int k = 0; k < MOEGEN_F_COUNT; k++) {
    char want[128];
    snprintf(want, sizeof want, "\n  %s ", moegen_config_key_name((moegen_field)k));
    CHECK(strstr(buf, want) != NULL, "--help lacks key %s", want + 3);
  }
  for (int refused = 0; refused < 2; refused++) {
    char list[1024];
    CHECK(moegen_hf_model_types(list, sizeof list, refused) < sizeof list, "model_type list");
    for (char *t = strtok(list, ", "); t; t = strtok(NULL, ", "))
      CHECK(has_word(buf, t), "--help lacks model_type %s", t);
  }
}

int main(int argc, char **argv) {
  const char *src = getenv("MOEGEN_SOURCE_DIR");
  if (!src) {
    fprintf(stderr, "test_config: set MOEGEN_SOURCE_DIR\n");
    return 1;
  }
  snprintf(fixtures, sizeof fixtures, "%s/tests/unit/configs", src);
  snprintf(models, sizeof models, "%s/tests/data/models", src);
  test_keys();
  test_defaults();
  test_presets();
  test_hf_models();
  test_hf_origins();
  test_hf_nonfinite();
  test_hf_errors();
  test_hf_families();
  test_hf_model_files();
  test_hf_family_rules();
  test_lua_good();
  test_lua_errors();
  test_validation();
  test_set();
  test_to_lua();
  test_recipe();
  if (argc > 1) test_help(argv[1]);
  return check_result("test_config");
}
