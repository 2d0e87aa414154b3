# moegenConfig.cmake -- find_package(moegen) of an installed moegen: the
# generator executable moegen::moegen, the runtime library moegen::moegen_rt
# (static; dlopens libcuda.so.1 and libnvrtc.so.13) and moegen_generate()
# (moegen.cmake, next to this file).
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include("${CMAKE_CURRENT_LIST_DIR}/moegenTargets.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/moegen.cmake")
