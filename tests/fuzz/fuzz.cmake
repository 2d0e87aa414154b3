# tests/fuzz/fuzz.cmake -- the fuzz harness of the three config inputs (a Lua
# file, a Hugging Face config.json, a --set list; label fuzz).
#
# fuzz_config: the entry point tests/fuzz/fuzz_config.c with the driver
# tests/fuzz/driver.c, on moegen_gen_fuzz, the generator library's sources
# compiled a second time with ASan and UBSan (and -fsanitize-coverage=trace-pc,
# the driver's feedback: the library's edges only); Lua and jansson stay the
# system libraries, and the main build's flags are untouched. The test
# fuzz_config replays the corpus (tests/fuzz/corpus: seeds lua-*, hf-*,
# set-* by kind; finding-*, inputs that once found a bug) and fuzzes until
# 60 s have passed; MOEGEN_FUZZ_SECONDS=N ctest -L fuzz runs it for N
# seconds. Findings are written to build/tests/fuzz-findings/crash-*.
#
# With -DMOEGEN_FUZZ=ON (clang with libFuzzer): also fuzz_config_libfuzzer,
# the same entry point under libFuzzer (test fuzz_config_libfuzzer, label
# fuzz; its new inputs go to build/tests/fuzz-libfuzzer-corpus).
include(CheckCSourceCompiles)
set(MOEGEN_FUZZ_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=all)

# Whether the C compiler builds and links the program `source` with the
# flags in ARGN.
function(moegen_fuzz_flags_work var source)
  list(JOIN ARGN " " CMAKE_REQUIRED_FLAGS)
  set(CMAKE_REQUIRED_LINK_OPTIONS ${ARGN})
  check_c_source_compiles("${source}" ${var})
endfunction()

# moegen_fuzz_library(NAME flags...): the generator library's sources
# compiled with the flags (its include directories, moegen_gen's links).
function(moegen_fuzz_library name)
  list(TRANSFORM MOEGEN_GEN_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/ REGEX "^gen/" OUTPUT_VARIABLE sources)
  add_library(${name} STATIC ${sources} ${MOEGEN_DEP_OBJECTS})
  add_dependencies(${name} moegen_gen) # which generates MOEGEN_EMBEDDED_C
  target_compile_options(${name} PRIVATE ${ARGN} -fno-omit-frame-pointer)
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/include
    PRIVATE $<TARGET_PROPERTY:moegen_gen,INCLUDE_DIRECTORIES>)
  target_link_libraries(${name} PUBLIC moegen_rt m)
  if(NOT MOEGEN_STATIC_DEPS)
    target_link_libraries(${name} PUBLIC moegen::lua moegen::jansson)
  endif()
  target_link_options(${name} INTERFACE ${MOEGEN_FUZZ_SANITIZE})
endfunction()

set(MOEGEN_FUZZ_ARGS -x ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/config.dict)
set(MOEGEN_FUZZ_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)

set(MOEGEN_FUZZ_ENTRY "int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }")
moegen_fuzz_flags_work(MOEGEN_FUZZ_SANITIZERS_WORK
  "void __sanitizer_cov_trace_pc(void) {} ${MOEGEN_FUZZ_ENTRY} int main(void) { return 0; }"
  ${MOEGEN_FUZZ_SANITIZE} -fsanitize-coverage=trace-pc)
if(NOT MOEGEN_FUZZ_SANITIZERS_WORK)
  list(JOIN MOEGEN_FUZZ_SANITIZE " " flags)
  message(STATUS "fuzz_config not built: ${CMAKE_C_COMPILER_ID} cannot build with ${flags} -fsanitize-coverage=trace-pc")
else()
  moegen_fuzz_library(moegen_gen_fuzz ${MOEGEN_FUZZ_SANITIZE} -fsanitize-coverage=trace-pc)
  add_executable(fuzz_config fuzz/fuzz_config.c fuzz/driver.c)
  target_compile_options(fuzz_config PRIVATE ${MOEGEN_FUZZ_SANITIZE})
  target_include_directories(fuzz_config PRIVATE ${CMAKE_SOURCE_DIR}/gen)
  target_link_libraries(fuzz_config PRIVATE moegen_gen_fuzz)
  add_test(NAME fuzz_config COMMAND fuzz_config -t 60 ${MOEGEN_FUZZ_ARGS}
    -o ${CMAKE_CURRENT_BINARY_DIR}/fuzz-findings ${MOEGEN_FUZZ_CORPUS})
  set_tests_properties(fuzz_config PROPERTIES LABELS fuzz)
endif()

if(MOEGEN_FUZZ)
  moegen_fuzz_flags_work(MOEGEN_FUZZ_LIBFUZZER_WORKS "${MOEGEN_FUZZ_ENTRY}" -fsanitize=fuzzer)
  if(NOT MOEGEN_FUZZ_LIBFUZZER_WORKS)
    message(FATAL_ERROR "MOEGEN_FUZZ=ON needs a C compiler with libFuzzer (-fsanitize=fuzzer): "
      "configure with CMAKE_C_COMPILER=clang (Debian: clang and libclang-rt-dev)")
  endif()
  moegen_fuzz_library(moegen_gen_libfuzzer ${MOEGEN_FUZZ_SANITIZE} -fsanitize=fuzzer-no-link)
  add_executable(fuzz_config_libfuzzer fuzz/fuzz_config.c)
  target_compile_options(fuzz_config_libfuzzer PRIVATE ${MOEGEN_FUZZ_SANITIZE} -fsanitize=fuzzer)
  target_link_options(fuzz_config_libfuzzer PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_config_libfuzzer PRIVATE moegen_gen_libfuzzer)
  set(corpus ${CMAKE_CURRENT_BINARY_DIR}/fuzz-libfuzzer-corpus)
  file(MAKE_DIRECTORY ${corpus} ${CMAKE_CURRENT_BINARY_DIR}/fuzz-findings)
  add_test(NAME fuzz_config_libfuzzer COMMAND fuzz_config_libfuzzer -max_total_time=60
    -dict=${CMAKE_CURRENT_SOURCE_DIR}/fuzz/config.dict
    -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz-findings/ ${corpus} ${MOEGEN_FUZZ_CORPUS})
  set_tests_properties(fuzz_config_libfuzzer PROPERTIES LABELS fuzz)
endif()
