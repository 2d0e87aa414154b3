# tests/unit/template.cmake -- test_template: the template engine, the
# sandbox and the embed tool (label unit).
#
# The test embeds its own files with moegen_embed: templates/engine.lua and
# the fixtures of unit/template_fixtures (odd bytes for the round trip, small
# files for include()). Its moegen_embedded_files and moegen_embedded_find
# take the place of libmoegen_gen's, whose archive member defining them is
# then not linked. The output names files by basename only, so absolute
# paths keep it deterministic.
set(MOEGEN_TEMPLATE_TEST_FILES
  ${CMAKE_SOURCE_DIR}/templates/engine.lua
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/template_fixtures/embed_bytes.bin
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/template_fixtures/empty.txt
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/template_fixtures/include.txt)
set(MOEGEN_TEMPLATE_TEST_C ${CMAKE_CURRENT_BINARY_DIR}/template_embedded.c)
add_custom_command(OUTPUT ${MOEGEN_TEMPLATE_TEST_C}
  COMMAND moegen_embed ${MOEGEN_TEMPLATE_TEST_C} ${MOEGEN_TEMPLATE_TEST_FILES}
  DEPENDS moegen_embed ${MOEGEN_TEMPLATE_TEST_FILES}
  COMMENT "Embedding the template test files")

moegen_add_test(test_template SOURCES unit/test_template.c ${MOEGEN_TEMPLATE_TEST_C} LABELS unit)
target_compile_definitions(test_template PRIVATE TEMPLATE_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
