# cmake --install: headers, the library (the stage archives; with BUILD_SHARED_LIBS=ON the one
# shared library, libfovea.so, instead), the CLI, a CMake package (find_package(fovea CONFIG
# [COMPONENTS encoder vulkan])) and fovea.pc. The package's targets are the same in both: fovea::fovea
# and one per stage (fovea::tokenize ...), which in a shared build all name libfovea.so.
include(CMakePackageConfigHelpers)

get_property(_public_headers GLOBAL PROPERTY FOVEA_PUBLIC_HEADERS)
list(TRANSFORM _public_headers PREPEND ${PROJECT_SOURCE_DIR}/include/fovea/)
install(FILES ${_public_headers} ${PROJECT_SOURCE_DIR}/include/fovea/fovea.hpp
  ${PROJECT_BINARY_DIR}/generated/fovea/version_gen.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fovea COMPONENT dev)

if(BUILD_SHARED_LIBS)
  # fovea::fovea is libfovea.so; fovea::<stage> an interface target naming it.
  set(_fovea_installed fovea_shared)
  foreach(stage IN LISTS FOVEA_STAGES)
    add_library(fovea_export_${stage} INTERFACE)
    set_target_properties(fovea_export_${stage} PROPERTIES EXPORT_NAME ${stage})
    target_link_libraries(fovea_export_${stage} INTERFACE fovea_shared)
    list(APPEND _fovea_installed fovea_export_${stage})
  endforeach()
else()
  set(_fovea_installed fovea ${_fovea_stage_targets})
endif()
install(TARGETS ${_fovea_installed} EXPORT foveaTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS fovea_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS fovea_main RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/fovea COMPONENT runtime)
install(EXPORT foveaTargets NAMESPACE fovea:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fovea COMPONENT dev)

# The package's optional components are the parts this build has.
set(FOVEA_COMPONENTS "")
foreach(part encoder vulkan)
  string(TOUPPER ${part} P)
  if(FOVEA_HAVE_${P})
    list(APPEND FOVEA_COMPONENTS ${part})
  endif()
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/foveaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/foveaConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fovea)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/foveaConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/foveaConfig.cmake ${PROJECT_BINARY_DIR}/foveaConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fovea COMPONENT dev)

# pkg-config: the stage libraries downstream first (static linking order), their system
# libraries in Libs.private (static) / Requires.private.
set(_pc_libs "")
set(_rev ${FOVEA_STAGES})
list(REVERSE _rev)
foreach(stage IN LISTS _rev)
  string(APPEND _pc_libs " -lfovea_${stage}")
endforeach()
if(BUILD_SHARED_LIBS)
  set(_pc_libs " -lfovea")
endif()
set(_pc_requires_private "libpng libjpeg libhwy")
set(_pc_libs_private "-lpthread")
if(FOVEA_HAVE_ENCODER)
  string(APPEND _pc_libs_private " -ldnnl -fopenmp")
endif()
if(FOVEA_HAVE_VULKAN)
  string(APPEND _pc_requires_private " vulkan")
endif()
foreach(extra IN LISTS FOVEA_PC_REQUIRES_PRIVATE)
  string(APPEND _pc_requires_private " ${extra}")
endforeach()
foreach(extra IN LISTS FOVEA_PC_LIBS_PRIVATE)
  string(APPEND _pc_libs_private " ${extra}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/fovea.pc.in ${PROJECT_BINARY_DIR}/fovea.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fovea.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
