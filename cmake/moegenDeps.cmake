# cmake/moegenDeps.cmake -- the shared libraries of Lua 5.4 and jansson, which
# the generator library moegen_gen links when built with
# MOEGEN_STATIC_DEPS=OFF, as the imported targets moegen::lua and
# moegen::jansson (libraries only: moegen's public headers need neither).
#
# moegen's build includes it; installed next to moegenConfig.cmake, the
# package includes it to link an installed libmoegen_gen.a built that way.
#   MOEGEN_DEPS_HINTS  directories searched first (the package passes those
#                      the build found the libraries in)
# On return MOEGEN_DEPS_MISSING lists the libraries not found ("liblua5.4",
# "libjansson"); the targets of those found are defined (once per directory).
set(MOEGEN_DEPS_MISSING "")
set(_moegen_lua_names lua5.4 lua54 lua-5.4)
set(_moegen_jansson_names jansson)
foreach(_moegen_dep lua jansson)
  string(TOUPPER ${_moegen_dep} _moegen_var)
  set(_moegen_var MOEGEN_${_moegen_var}_LIBRARY)
  find_library(${_moegen_var} NAMES ${_moegen_${_moegen_dep}_names} HINTS ${MOEGEN_DEPS_HINTS})
  if(NOT ${_moegen_var})
    list(GET _moegen_${_moegen_dep}_names 0 _moegen_name)
    list(APPEND MOEGEN_DEPS_MISSING lib${_moegen_name})
  elseif(NOT TARGET moegen::${_moegen_dep})
    add_library(moegen::${_moegen_dep} UNKNOWN IMPORTED)
    set_target_properties(moegen::${_moegen_dep} PROPERTIES IMPORTED_LOCATION "${${_moegen_var}}")
  endif()
endforeach()
unset(_moegen_dep)
unset(_moegen_name)
unset(_moegen_var)
unset(_moegen_lua_names)
unset(_moegen_jansson_names)
