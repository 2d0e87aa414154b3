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

# moegen_cli_test(NAME RC rc [OUT re...] [ERR re...] [ABSENT path] [PRESENT path...] ARGS a...)
function(moegen_cli_test name)
  cmake_parse_arguments(T "" "RC;ABSENT" "OUT;ERR;PRESENT;ARGS" ${ARGN})
  list(JOIN T_OUT "$<SEMICOLON>" out)
  list(JOIN T_ERR "$<SEMICOLON>" err)
  list(JOIN T_PRESENT "$<SEMICOLON>" present)
  list(JOIN T_ARGS "$<SEMICOLON>" args)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:moegen>$<SEMICOLON>${args}" -DRC=${T_RC}
      "-DOUT=${out}" "-DERR=${err}" "-DABSENT=${T_ABSENT}" "-DPRESENT=${present}"
      -P ${MOEGEN_CLI_EXPECT})
  set_tests_properties(${name} PROPERTIES LABELS unit)
endfunction()

moegen_cli_test(cli_config_help RC 0 ARGS --help
  OUT "usage: moegen" "CONFIG\\.lua" "--preset NAME" "--hf-config FILE" "--set KEY=VALUE"
      "--name NAME" "--out DIR" "--arch ARCH" "--compile MODE" "--list-presets" "--print-config"
      "--help" "--version" "--preset, then\n--hf-config, then CONFIG\\.lua, then each --set"
      "DIR/NAME\\.cu" "DIR/NAME\\.h" "DIR/NAME\\.c" "DIR/NAME\\.json" "64  EX_USAGE"
      "65  EX_DATAERR" "66  EX_NOINPUT" "78  EX_CONFIG")
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
  ERR "^moegen: <command line>:5: expected key=value, got \"topk\"\n")
moegen_cli_test(cli_config_bad_name RC 64 ABSENT ${MOEGEN_CLI_OUT}/bad_name
  ARGS --preset deepseek-v3 --name 1x --out ${MOEGEN_CLI_OUT}/bad_name
  ERR "^moegen: --name \"1x\": not a C identifier\n")
moegen_cli_test(cli_config_bad_type RC 65 ABSENT ${MOEGEN_CLI_OUT}/bad_type
  ARGS --preset deepseek-v3 --set experts=many --name t --out ${MOEGEN_CLI_OUT}/bad_type
  ERR "^moegen: <command line>:4: experts: expected an integer, got \"many\"\n$")
moegen_cli_test(cli_config_bad_config RC 78 ABSENT ${MOEGEN_CLI_OUT}/bad_config
  ARGS ${MOEGEN_CLI_CONFIGS}/bad_topk.lua --name t --out ${MOEGEN_CLI_OUT}/bad_config
  ERR "^moegen: [^\n]*/bad_topk\\.lua:5: topk: 40 exceeds the kernel limit of 32\n$")
moegen_cli_test(cli_config_malformed_lua RC 65 ABSENT ${MOEGEN_CLI_OUT}/malformed
  ARGS ${MOEGEN_CLI_CONFIGS}/malformed.lua --name t --out ${MOEGEN_CLI_OUT}/malformed
  ERR "^moegen: [^\n]*/malformed\\.lua:4: ")
moegen_cli_test(cli_config_malformed_json RC 65 ARGS --print-config
  --hf-config ${MOEGEN_CLI_CONFIGS}/hf_malformed.json ERR "^moegen: [^\n]*/hf_malformed\\.json:4: json: ")
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
