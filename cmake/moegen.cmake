# cmake/moegen.cmake -- moegen_generate(): run the moegen generator at build
# time and wrap its output in a static library.
#
#   moegen_generate(NAME <name>
#                   [PRESET <preset>] [HF_CONFIG <config.json>] [CONFIG <file.lua>]
#                   [SET <key>=<value> ...]
#                   [ARCH <sm_90a|sm_80|...>] [COMPILE <nvcc|nvrtc|jit>]
#                   OUTPUT_DIR <dir>)
#
# Adds a custom command that runs
#   moegen [CONFIG] --preset P --hf-config F --set k=v... --name NAME --out DIR
#          --arch A --compile C
# producing DIR/NAME.{cu,h,c,json}, and a static library target NAME: the
# generated NAME.c (the module image, embedded cubins unless COMPILE jit)
# linked PUBLIC to moegen::moegen_rt, with DIR as its PUBLIC include
# directory, so a consumer does
#   target_link_libraries(app PRIVATE NAME)   and   #include "NAME.h"
#
# At least one config source is required; several apply in the CLI's order
# (preset, HF config, Lua file, then each SET). ARCH and COMPILE default to
# the moegen executable's defaults (the arch it was built with, nvrtc).
# Relative CONFIG / HF_CONFIG paths are relative to the calling
# CMakeLists.txt, a relative OUTPUT_DIR to its binary directory. The command
# reruns when the config file or the moegen executable (which embeds the
# templates) changes.
#
# The generator is the target moegen::moegen: an alias of the in-tree moegen
# executable (add_subdirectory of the moegen source tree), or the imported
# executable of an installed moegen (find_package(moegen)).
include_guard(GLOBAL)

function(moegen_generate)
  cmake_parse_arguments(PARSE_ARGV 0 G ""
    "NAME;PRESET;CONFIG;HF_CONFIG;ARCH;COMPILE;OUTPUT_DIR" "SET")
  if(G_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "moegen_generate: unknown arguments: ${G_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT G_NAME OR NOT G_OUTPUT_DIR)
    message(FATAL_ERROR "moegen_generate: NAME and OUTPUT_DIR are required")
  endif()
  if(NOT G_PRESET AND NOT G_CONFIG AND NOT G_HF_CONFIG)
    message(FATAL_ERROR "moegen_generate(${G_NAME}): give PRESET, CONFIG or HF_CONFIG")
  endif()
  if(G_COMPILE AND NOT G_COMPILE MATCHES "^(nvcc|nvrtc|jit)$")
    message(FATAL_ERROR "moegen_generate(${G_NAME}): COMPILE must be nvcc, nvrtc or jit")
  endif()
  if(NOT TARGET moegen::moegen OR NOT TARGET moegen::moegen_rt)
    message(FATAL_ERROR "moegen_generate(${G_NAME}): no moegen::moegen target: "
      "find_package(moegen) or add_subdirectory(<moegen source>) first")
  endif()

  cmake_path(ABSOLUTE_PATH G_OUTPUT_DIR BASE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}"
    NORMALIZE OUTPUT_VARIABLE out_dir)
  set(args "")
  set(inputs "")
  if(G_CONFIG)
    cmake_path(ABSOLUTE_PATH G_CONFIG NORMALIZE OUTPUT_VARIABLE lua)
    list(APPEND args "${lua}")
    list(APPEND inputs "${lua}")
  endif()
  if(G_PRESET)
    list(APPEND args --preset "${G_PRESET}")
  endif()
  if(G_HF_CONFIG)
    cmake_path(ABSOLUTE_PATH G_HF_CONFIG NORMALIZE OUTPUT_VARIABLE hf)
    list(APPEND args --hf-config "${hf}")
    list(APPEND inputs "${hf}")
  endif()
  foreach(kv IN LISTS G_SET)
    list(APPEND args --set "${kv}")
  endforeach()
  list(APPEND args --name "${G_NAME}" --out "${out_dir}")
  if(G_ARCH)
    list(APPEND args --arch "${G_ARCH}")
  endif()
  if(G_COMPILE)
    list(APPEND args --compile "${G_COMPILE}")
  endif()

  set(outputs "${out_dir}/${G_NAME}.cu" "${out_dir}/${G_NAME}.h" "${out_dir}/${G_NAME}.c"
    "${out_dir}/${G_NAME}.json")
  add_custom_command(OUTPUT ${outputs}
    COMMAND "$<TARGET_FILE:moegen::moegen>" ${args}
    DEPENDS moegen::moegen ${inputs}
    COMMENT "moegen: generating ${G_NAME}.{cu,h,c,json} in ${out_dir}"
    VERBATIM)

  add_library(${G_NAME} STATIC "${out_dir}/${G_NAME}.c" "${out_dir}/${G_NAME}.h")
  target_include_directories(${G_NAME} PUBLIC "${out_dir}")
  target_link_libraries(${G_NAME} PUBLIC moegen::moegen_rt)
  set_target_properties(${G_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
