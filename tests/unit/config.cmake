# tests/unit/config.cmake -- configuration input and the moegen CLI (label unit).
#
# test_config: presets, HF config.json loading (each preset equals its
# model's file in MOEGEN_MODELS_DIR), Lua config files and their
# sandbox, validation rules, --set parsing, to_lua round trips; it also
# checks that `moegen --help` lists every config key.
moegen_add_test(test_config SOURCES unit/test_config.c LABELS unit ARGS $<TARGET_FILE:moegen>)

# CLI tests: exit status and output of the moegen binary, through
# unit/configs/cli_expect.cmake. Lists of regexes are joined with
# $<SEMICOLON> so they survive add_test.
set(MOEGEN_CLI_EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/unit/configs/cli_expect.cmake)
set(MOEGEN_CLI_CONFIGS ${CMAKE_CURRENT_SOURCE_DIR}/unit/configs)
set(MOEGEN_CLI_OUT ${CMAKE_CURRENT_BINARY_DIR}/cli_out)

# moegen_cli_test(NAME RC rc [OUT re...] [ERR re...] [ABSENT path] [PRESENT path...]
#                 [MKDIR dir...] [STDOUT_FILE path] [ENV VAR=value...] ARGS a...)
# (see unit/configs/cli_expect.cmake; ENV sets the test's environment)
function(moegen_cli_test name)
  cmake_parse_arguments(T "" "RC;ABSENT;STDOUT_FILE" "OUT;ERR;PRESENT;MKDIR;ENV;ARGS" ${ARGN})
  list(JOIN T_OUT "$<SEMICOLON>" out)
  list(JOIN T_ERR "$<SEMICOLON>" err)
  list(JOIN T_PRESENT "$<SEMICOLON>" present)
  list(JOIN T_MKDIR "$<SEMICOLON>" mkdir)
  list(JOIN T_ARGS "$<SEMICOLON>" args)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:moegen>$<SEMICOLON>${args}" -DRC=${T_RC}
      "-DOUT=${out}" "-DERR=${err}" "-DABSENT=${T_ABSENT}" "-DPRESENT=${present}"
      "-DMKDIR=${mkdir}" "-DSTDOUT_FILE=${T_STDOUT_FILE}" -P ${MOEGEN_CLI_EXPECT})
  set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "${T_ENV}")
endfunction()

# A stand-in libnvrtc.so.13 (MOEGEN_LIBNVRTC) whose compiles fail the way
# $FAKE_NVRTC says, and which supports only sm_75, sm_80 and sm_90: it
# drives the compile failure and arch paths without depending on the
# installed NVRTC.
add_library(moegen_fake_nvrtc SHARED unit/fake_nvrtc.c)
set(MOEGEN_FAKE_NVRTC MOEGEN_LIBNVRTC=$<TARGET_FILE:moegen_fake_nvrtc>)

moegen_cli_test(cli_config_help RC 0 ARGS --help
  OUT "usage: moegen" "CONFIG\\.lua" "--preset NAME" "--hf-config FILE" "--set KEY=VALUE"
      "--name NAME" "--out DIR" "--arch ARCH" "--compile MODE" "--list-presets" "--print-config"
      "--help" "--version" "--preset, then\n--hf-config, then CONFIG\\.lua, then each --set"
      "\nHugging Face config\\.json families \\(--hf-config: " "\n  loaded  +deepseek_v2, "
      "\n  refused  +phimoe, ernie4_5_moe "
      "DIR/NAME\\.cu" "DIR/NAME\\.h" "DIR/NAME\\.c" "DIR/NAME\\.json" "64  EX_USAGE"
      "65  EX_DATAERR" "66  EX_NOINPUT" "69  EX_UNAVAILABLE" "70  EX_SOFTWARE" "71  EX_OSERR"
      "73  EX_CANTCREAT" "74  EX_IOERR" "78  EX_CONFIG")
# --version: version, revision (this checkout's, or unknown), NVRTC's version
# and archs; with NVRTC unloadable it says why, and still exits 0.
moegen_cli_test(cli_config_version RC 0 ARGS --version
  OUT "^moegen ${PROJECT_VERSION}\nrevision: ([0-9a-f]+(-dirty)?|unknown)\nNVRTC [0-9]+\\.[0-9]+:( sm_[0-9]+)*( sm_80)( sm_[0-9]+)*( sm_90)( sm_[0-9]+)*\n$")
moegen_cli_test(cli_config_version_no_nvrtc RC 0 ARGS --version
  OUT "^moegen ${PROJECT_VERSION}\nrevision: ([0-9a-f]+(-dirty)?|unknown)\nNVRTC not found: cannot load NVRTC /nonexistent/libnvrtc\\.so\\.13: [^\n]+\n$")
set_tests_properties(cli_config_version_no_nvrtc PROPERTIES
  ENVIRONMENT MOEGEN_LIBNVRTC=/nonexistent/libnvrtc.so.13)
moegen_cli_test(cli_config_list_presets RC 0 ARGS --list-presets
  OUT "^deepseek-v3\nkimi-k2\nqwen3-30b-a3b\nqwen3-235b-a22b\nmixtral-8x7b\ngpt-oss-120b\nllama4-maverick\n$")
moegen_cli_test(cli_config_print_preset RC 0 ARGS --print-config --preset deepseek-v3
  OUT "^return {\n" "\n  experts = 256,\n" "\n  groups = 8,\n" "\n  scaling = 2\\.5,\n")
# Source order: --preset, then --hf-config, then CONFIG.lua, then --set, whatever
# the order on the command line.
moegen_cli_test(cli_config_source_order RC 0
  ARGS --set=topk=3 ${MOEGEN_CLI_CONFIGS}/order.lua
       --hf-config ${MOEGEN_MODELS_DIR}/mixtral-8x7b.json --preset=deepseek-v3 --print-config
  OUT "\n  experts = 64,\n" "\n  topk = 3,\n" "\n  hidden = 4096,\n" "\n  score = \"softmax\",\n"
      "\n  expert_bias = false,\n")
moegen_cli_test(cli_config_bad_option RC 64 ARGS --bogus
  ERR "^moegen: unknown option --bogus\nmoegen: see moegen --help\n$")
moegen_cli_test(cli_config_missing_value RC 64 ARGS --print-config --preset
  ERR "^moegen: --preset needs a value\n")
moegen_cli_test(cli_config_unknown_preset RC 64 ARGS --print-config --preset nope
  ERR "^moegen: unknown preset \"nope\"")
moegen_cli_test(cli_config_bad_set RC 64 ARGS --print-config --preset kimi-k2 --set topk
  ERR "^moegen: command-line argument 5: expected key=value, got \"topk\"\n")
moegen_cli_test(cli_config_bad_name RC 64 ABSENT ${MOEGEN_CLI_OUT}/bad_name
  ARGS --preset deepseek-v3 --name 1x --out ${MOEGEN_CLI_OUT}/bad_name
  ERR "^moegen: --name \"1x\": not a C identifier\n")
moegen_cli_test(cli_config_bad_type RC 65 ABSENT ${MOEGEN_CLI_OUT}/bad_type
  ARGS --preset deepseek-v3 --set experts=many --name t --out ${MOEGEN_CLI_OUT}/bad_type
  ERR "^moegen: command-line argument 4: experts: expected an integer, got \"many\"\n$")
moegen_cli_test(cli_config_bad_config RC 78 ABSENT ${MOEGEN_CLI_OUT}/bad_config
  ARGS ${MOEGEN_CLI_CONFIGS}/bad_topk.lua --name t --out ${MOEGEN_CLI_OUT}/bad_config
  ERR "^moegen: [^\n]*/bad_topk\\.lua:5: topk: 40 exceeds the kernel limit of 32\n$")
moegen_cli_test(cli_config_malformed_lua RC 65 ABSENT ${MOEGEN_CLI_OUT}/malformed
  ARGS ${MOEGEN_CLI_CONFIGS}/malformed.lua --name t --out ${MOEGEN_CLI_OUT}/malformed
  ERR "^moegen: [^\n]*/malformed\\.lua:4: ")
moegen_cli_test(cli_config_malformed_json RC 65 ARGS --print-config
  --hf-config ${MOEGEN_CLI_CONFIGS}/hf_malformed.json ERR "^moegen: [^\n]*/hf_malformed\\.json:4: json: ")
# A key twice in one object: jansson would keep the last; moegen names the key and line.
moegen_cli_test(cli_config_hf_duplicate_key RC 65 ARGS --print-config
  --hf-config ${MOEGEN_CLI_CONFIGS}/hf_duplicate_key.json
  ERR "^moegen: [^\n]*/hf_duplicate_key\\.json:6: num_experts: duplicate key \\(a JSON object names each key once\\)\n$")
moegen_cli_test(cli_config_no_input RC 66 ARGS --print-config ${MOEGEN_CLI_CONFIGS}/no_such.lua
  ERR "^moegen: [^\n]*/no_such\\.lua: cannot read: ")
# Success without a GPU or NVRTC: --compile jit renders and writes the four files.
moegen_cli_test(cli_config_generate_jit RC 0
  ARGS --preset kimi-k2 --name k2 --out ${MOEGEN_CLI_OUT}/jit --compile jit
  ERR "^moegen: "
  PRESENT ${MOEGEN_CLI_OUT}/jit/k2.cu ${MOEGEN_CLI_OUT}/jit/k2.h ${MOEGEN_CLI_OUT}/jit/k2.c
          ${MOEGEN_CLI_OUT}/jit/k2.json)
# A module without the GEMM or permute kernels says so when it is generated.
moegen_cli_test(cli_config_generate_notes RC 0
  ARGS --preset mixtral-8x7b --set hidden=4100 --arch sm_80 --name n --out ${MOEGEN_CLI_OUT}/notes
       --compile jit
  ERR "\nmoegen: note: no grouped GEMM kernels \\(they need --arch sm_80 or later[^\n]*ops of n return MOEGEN_ERR_NOT_SUPPORTED\n"
      "\nmoegen: note: no permute kernels [^\n]*ops of n return MOEGEN_ERR_NOT_SUPPORTED\n"
  PRESENT ${MOEGEN_CLI_OUT}/notes/n.cu)

# The real config.json of each family without a preset (tests/data/models):
# --print-config prints exactly these lines.
# moegen_hf_print_test(NAME FILE LINE...): the LINEs are the table's, without
# the two-space indent and the comma; regex characters in them are escaped.
function(moegen_hf_print_test name file)
  set(re "^return {\n")
  foreach(line IN LISTS ARGN)
    string(REGEX REPLACE "([.+*?()|^$])" "\\\\\\1" line "${line}")
    string(APPEND re "  ${line},\n")
  endforeach()
  moegen_cli_test(${name} RC 0 ARGS --print-config --hf-config ${MOEGEN_MODELS_DIR}/${file}.json
    OUT "${re}}\n$")
endfunction()
moegen_hf_print_test(cli_config_hf_deepseek_v2_lite deepseek-v2-lite
  [[name = "deepseek-v2-lite"]] [[experts = 64]] [[topk = 6]] [[hidden = 2048]] [[ffn = 1408]]
  [[score = "softmax"]] [[pre_softmax = true]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = false]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 2]] [[aux_loss_coeff = 0.001]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
moegen_hf_print_test(cli_config_hf_glm_4_5_air glm-4.5-air
  [[name = "glm-4.5-air"]] [[experts = 128]] [[topk = 8]] [[hidden = 4096]] [[ffn = 1408]]
  [[score = "sigmoid"]] [[pre_softmax = false]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = true]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 1]] [[aux_loss_coeff = 0.0]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
moegen_hf_print_test(cli_config_hf_qwen2_57b_a14b qwen2-57b-a14b
  [[name = "qwen2-57b-a14b"]] [[experts = 64]] [[topk = 8]] [[hidden = 3584]] [[ffn = 2560]]
  [[score = "softmax"]] [[pre_softmax = true]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = false]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 1]] [[aux_loss_coeff = 0.001]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
moegen_hf_print_test(cli_config_hf_olmoe_1b_7b olmoe-1b-7b-0924
  [[name = "olmoe-1b-7b-0924"]] [[experts = 64]] [[topk = 8]] [[hidden = 2048]] [[ffn = 1024]]
  [[score = "softmax"]] [[pre_softmax = true]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = false]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 0]] [[aux_loss_coeff = 0.01]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
moegen_hf_print_test(cli_config_hf_granite_1b_a400m granite-3.0-1b-a400m-instruct
  [[name = "granite-3.0-1b-a400m-instruct"]] [[experts = 32]] [[topk = 8]] [[hidden = 1024]]
  [[ffn = 512]] [[score = "softmax"]] [[pre_softmax = false]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = false]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 0]] [[aux_loss_coeff = 0.0]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
moegen_hf_print_test(cli_config_hf_llama4_scout llama4-scout
  [[name = "llama4-scout"]] [[experts = 16]] [[topk = 1]] [[hidden = 5120]] [[ffn = 8192]]
  [[score = "sigmoid"]] [[pre_softmax = false]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = false]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 1]] [[aux_loss_coeff = 0.001]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
moegen_hf_print_test(cli_config_hf_dbrx_instruct dbrx-instruct
  [[name = "dbrx-instruct"]] [[experts = 16]] [[topk = 4]] [[hidden = 6144]] [[ffn = 10752]]
  [[score = "softmax"]] [[pre_softmax = false]] [[groups = 0]] [[group_topk = 0]]
  [[expert_bias = false]] [[scaling = 1.0]] [[logits_dtype = "bf16"]] [[dtype = "bf16"]]
  [[shared_experts = 0]] [[aux_loss_coeff = 0.0]] [[quantile_balancing = false]]
  [[router_bwd = "saved"]] [[recipe = "bf16"]] [[fp8_grad_format = "hybrid"]] [[fp8_scale = "pow2"]])
# router_bwd: the mode --print-config prints, and a name it does not know.
moegen_cli_test(cli_config_router_bwd RC 0 ARGS --print-config --preset mixtral-8x7b
  --set router_bwd=recompute OUT "\n  quantile_balancing = false,\n  router_bwd = \"recompute\",\n  recipe = \"bf16\",\n")
moegen_cli_test(cli_config_router_bwd_unknown RC 78 ARGS --print-config --preset mixtral-8x7b
  --set router_bwd=recomputed
  ERR "^moegen: command-line argument 5: router_bwd: unknown router backward mode \"recomputed\" \\(expected saved\\|recompute\\)\n$")
# Real files whose routing moegen cannot compute: refused, saying why.
moegen_cli_test(cli_config_hf_deepseek_v2 RC 78 ARGS --print-config
  --hf-config ${MOEGEN_MODELS_DIR}/deepseek-v2.json
  ERR "^moegen: [^\n]*/deepseek-v2\\.json:22: topk_method: group_limited_greedy with num_experts_per_tok 6 and topk_group 3 is not supported: deepseek_v2 scores an expert group by its best score, moegen \\(like TE\\) by the sum of its best num_experts_per_tok/topk_group = 2; they select the same experts only when num_experts_per_tok = topk_group\n$")
# DeepSeek-V3's quantization_config (block FP8) sets recipe fp8_block; the preset stays bf16.
moegen_cli_test(cli_config_hf_deepseek_v3_fp8 RC 0 ARGS --print-config
  --hf-config ${MOEGEN_MODELS_DIR}/deepseek-v3.json
  OUT "\n  recipe = \"fp8_block\",\n  fp8_grad_format = \"hybrid\",\n  fp8_scale = \"pow2\",\n}\n$")
moegen_cli_test(cli_config_fp8_block_dims RC 78 ARGS --print-config --preset gpt-oss-120b
  --set recipe=fp8_block
  ERR "^moegen: <preset gpt-oss-120b>: hidden: 2880 is not a multiple of 128, which recipe = \"fp8_block\" \\(set by command-line argument 5\\) needs")
moegen_cli_test(cli_config_hf_phimoe RC 78 ARGS --print-config
  --hf-config ${MOEGEN_MODELS_DIR}/phi-3.5-moe-instruct.json
  ERR "^moegen: [^\n]*/phi-3\\.5-moe-instruct\\.json:8: model_type: \"phimoe\" is not supported: it routes with sparsemixer: [^\n]*\n$")
moegen_cli_test(cli_config_hf_ernie4_5_moe RC 78 ARGS --print-config
  --hf-config ${MOEGEN_MODELS_DIR}/ernie-4.5-21b-a3b.json
  ERR "^moegen: [^\n]*/ernie-4\\.5-21b-a3b\\.json:8: model_type: \"ernie4_5_moe\" is not supported: it selects experts by softmax scores plus e_score_correction_bias[^\n]*\n$")
# A family moegen does not know, named by architectures only: an error, no guess.
moegen_cli_test(cli_config_hf_hunyuan RC 65 ARGS --print-config
  --hf-config ${MOEGEN_MODELS_DIR}/hunyuan-a13b-instruct.json
  ERR "^moegen: [^\n]*/hunyuan-a13b-instruct\\.json: model_type: missing, and architectures names no supported model; moegen does not guess a model family \\(supported model_type values: [^\n]*\\)\n$")
# No model_type and no architectures: an error naming model_type, no guess.
moegen_cli_test(cli_config_hf_no_model_type RC 65 ARGS --print-config
  --hf-config ${MOEGEN_CLI_CONFIGS}/hf_no_model_type.json
  ERR "^moegen: [^\n]*/hf_no_model_type\\.json: model_type: missing, and there is no architectures; moegen does not guess a model family \\(supported model_type values: [^\n]*\\)\n$")

# --set with an empty key: the position is that of the argument, said so.
moegen_cli_test(cli_config_set_empty_key RC 64 ARGS --print-config --preset kimi-k2 --set =3
  ERR "^moegen: command-line argument 5: expected key=value, got \"=3\" \\(the key is empty\\)\n")
# A Hugging Face file that lacks a size: the error names the file, not <default>.
moegen_cli_test(cli_config_hf_missing_size RC 78 ARGS --print-config
  --hf-config ${MOEGEN_CLI_CONFIGS}/hf_missing_hidden.json
  ERR "^moegen: [^\n]*/hf_missing_hidden\\.json: hidden: must be > 0, got 0\n$")
# The config name must be UTF-8 (it goes into NAME.json); checked before rendering.
moegen_cli_test(cli_config_name_utf8 RC 65 ABSENT ${MOEGEN_CLI_OUT}/utf8
  ARGS ${MOEGEN_CLI_CONFIGS}/bad_utf8_name.lua --name t --out ${MOEGEN_CLI_OUT}/utf8 --compile jit
  ERR "^moegen: [^\n]*/bad_utf8_name\\.lua:7: name: not valid UTF-8 \\(byte 0xe9 at offset 3\\)\n$")

# Module names: checked before anything is rendered or written.
moegen_cli_test(cli_config_name_runtime RC 64 ABSENT ${MOEGEN_CLI_OUT}/name_moegen
  ARGS --preset kimi-k2 --name moegen --out ${MOEGEN_CLI_OUT}/name_moegen --compile jit
  ERR "^moegen: --name \"moegen\": reserved: its symbols \\(NAME_image, NAME_module_create, NAME_EXPERTS, \\.\\.\\.\\) would fall among the runtime's moegen_\\* and MOEGEN_\\* names\n")
moegen_cli_test(cli_config_name_runtime_prefix RC 64 ABSENT ${MOEGEN_CLI_OUT}/name_prefix
  ARGS --preset kimi-k2 --name MoeGen_x --out ${MOEGEN_CLI_OUT}/name_prefix --compile jit
  ERR "^moegen: --name \"MoeGen_x\": reserved: ")
moegen_cli_test(cli_config_name_keyword RC 64 ABSENT ${MOEGEN_CLI_OUT}/name_keyword
  ARGS --preset kimi-k2 --name class --out ${MOEGEN_CLI_OUT}/name_keyword --compile jit
  ERR "^moegen: --name \"class\": a C or C\\+\\+ keyword\n")
string(REPEAT "a" 5000 long_name)
moegen_cli_test(cli_config_name_long RC 64 ABSENT ${MOEGEN_CLI_OUT}/name_long
  ARGS --preset kimi-k2 --name ${long_name} --out ${MOEGEN_CLI_OUT}/name_long --compile jit
  ERR "^moegen: --name \"a+\\.\\.\\.\": longer than 63 characters\n")

# --arch: the form and range, then (NVRTC and JIT) the archs NVRTC supports.
moegen_cli_test(cli_config_arch_form RC 64 ABSENT ${MOEGEN_CLI_OUT}/arch_form
  ARGS --preset kimi-k2 --name x --arch sm_1 --out ${MOEGEN_CLI_OUT}/arch_form
  ERR "^moegen: --arch \"sm_1\": expected sm_XY or sm_XYZ from sm_50 to sm_199, with an optional a \\(from sm_90\\) or f \\(from sm_100\\) suffix\n")
moegen_cli_test(cli_config_arch_range RC 64 ABSENT ${MOEGEN_CLI_OUT}/arch_range
  ARGS --preset kimi-k2 --name x --arch sm_999999999999 --out ${MOEGEN_CLI_OUT}/arch_range
       --compile jit
  ERR "^moegen: --arch \"sm_999999999999\": expected sm_XY")
moegen_cli_test(cli_config_arch_suffix RC 64 ARGS --preset kimi-k2 --name x --arch sm_80a
  --out ${MOEGEN_CLI_OUT}/arch_suffix --compile nvcc ERR "^moegen: --arch \"sm_80a\": expected sm_XY")
moegen_cli_test(cli_config_arch_nvrtc RC 64 ABSENT ${MOEGEN_CLI_OUT}/arch_nvrtc ENV ${MOEGEN_FAKE_NVRTC}
  ARGS --preset kimi-k2 --name x --arch sm_100 --out ${MOEGEN_CLI_OUT}/arch_nvrtc --compile jit
  ERR "^moegen: --arch \"sm_100\": NVRTC 13\\.0 compiles for sm_75 sm_80 sm_90 sm_90a\n")

# Failures leave no output directory that moegen created, and keep one that
# existed. With the tests above, every exit status --help lists is produced:
# 0 (cli_config_help), 64 (cli_config_bad_option), 65 (cli_config_bad_type),
# 66 (cli_config_no_input), 78 (cli_config_bad_config) and these: 69, 70,
# 71, 73, 74.
moegen_cli_test(cli_config_no_nvrtc RC 69 ABSENT ${MOEGEN_CLI_OUT}/no_nvrtc
  ENV MOEGEN_LIBNVRTC=${MOEGEN_CLI_OUT}/no_such_libnvrtc.so.13
  ARGS --preset kimi-k2 --name x --out ${MOEGEN_CLI_OUT}/no_nvrtc/a/b
  ERR "\nmoegen: NVRTC is not available: cannot load NVRTC [^\n]*/no_such_libnvrtc\\.so\\.13")
moegen_cli_test(cli_config_compile_fails RC 70 ABSENT ${MOEGEN_CLI_OUT}/compile_fails
  ENV ${MOEGEN_FAKE_NVRTC}
  ARGS --preset kimi-k2 --name x --arch sm_90 --out ${MOEGEN_CLI_OUT}/compile_fails/a/b
  ERR "\nmoegen: NVRTC failed on x\\.cu \\(router unit\\):\nfake NVRTC: this library compiles nothing\n")
moegen_cli_test(cli_config_compile_fails_dir_kept RC 70 ENV ${MOEGEN_FAKE_NVRTC}
  MKDIR ${MOEGEN_CLI_OUT}/compile_kept PRESENT ${MOEGEN_CLI_OUT}/compile_kept
  ARGS --preset kimi-k2 --name x --arch sm_90 --out ${MOEGEN_CLI_OUT}/compile_kept
  ERR "\nmoegen: NVRTC failed on x\\.cu \\(router unit\\):\n")
moegen_cli_test(cli_config_compile_oom RC 71 ABSENT ${MOEGEN_CLI_OUT}/compile_oom
  ENV ${MOEGEN_FAKE_NVRTC} FAKE_NVRTC=oom
  ARGS --preset kimi-k2 --name x --arch sm_90 --out ${MOEGEN_CLI_OUT}/compile_oom
  ERR "\nmoegen: NVRTC ran out of memory on x\\.cu \\(router unit\\): nvrtcCreateProgram\\(x\\.cu\\): NVRTC_ERROR_OUT_OF_MEMORY\n")
moegen_cli_test(cli_config_out_file RC 73
  ARGS --preset kimi-k2 --name x --out ${MOEGEN_CLI_CONFIGS}/good.lua --compile jit
  ERR "^moegen: [^\n]*/configs/good\\.lua: not a directory\n$")
moegen_cli_test(cli_config_stdout_full RC 74 STDOUT_FILE /dev/full
  ARGS --print-config --preset kimi-k2 ERR "^moegen: cannot write to stdout")
# An --out longer than a path may be (in components of 10 bytes) is refused
# before any directory is made, not cut short.
string(REPEAT "dddddddddd/" 400 long_dir)
moegen_cli_test(cli_config_out_too_long RC 73 ABSENT ${MOEGEN_CLI_OUT}/dddddddddd
  ARGS --preset kimi-k2 --name x --out ${MOEGEN_CLI_OUT}/${long_dir} --compile jit
  ERR "^moegen: [^\n]*/cli_out/[d/]+\\.\\.\\.: output directory path too long \\(File name too long\\)\n$")
