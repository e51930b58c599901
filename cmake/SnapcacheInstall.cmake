include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SNAPCACHE_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/snapcache")

install(TARGETS snapcache snapcache_cli
  EXPORT snapcacheTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/snapcache DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${PROJECT_BINARY_DIR}/include/snapcache/version.h"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snapcache)
install(EXPORT snapcacheTargets NAMESPACE snapcache:: DESTINATION ${SNAPCACHE_CMAKE_DIR})

configure_package_config_file(cmake/snapcacheConfig.cmake.in
  "${PROJECT_BINARY_DIR}/snapcacheConfig.cmake" INSTALL_DESTINATION ${SNAPCACHE_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/snapcacheConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/snapcacheConfig.cmake"
              "${PROJECT_BINARY_DIR}/snapcacheConfigVersion.cmake"
        DESTINATION ${SNAPCACHE_CMAKE_DIR})
