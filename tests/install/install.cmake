# tests/install/install.cmake -- install_consumer (label unit, CPU only): the
# build installed into a fresh prefix serves a find_package(moegen) project
# (AOT and JIT) and plain pkg-config builds (install_consumer.cmake).
include(GNUInstallDirs)
add_test(NAME install_consumer COMMAND ${CMAKE_COMMAND}
  -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
  -DWORK=${CMAKE_CURRENT_BINARY_DIR}/install_consumer -DGENERATOR=${CMAKE_GENERATOR}
  -DC_COMPILER=${CMAKE_C_COMPILER} -DBUILD_TYPE=${CMAKE_BUILD_TYPE} -DVERSION=${PROJECT_VERSION}
  -DSTATIC_DEPS=${MOEGEN_STATIC_DEPS} -DBINDIR=${CMAKE_INSTALL_BINDIR}
  -DLIBDIR=${CMAKE_INSTALL_LIBDIR} -DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}
  -DMANDIR=${CMAKE_INSTALL_MANDIR} -P ${CMAKE_CURRENT_SOURCE_DIR}/install/install_consumer.cmake)
set_tests_properties(install_consumer PROPERTIES LABELS unit TIMEOUT 300)
