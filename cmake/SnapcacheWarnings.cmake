include_guard(GLOBAL)

# Applied to every C++ file we compile; third-party headers come in as system headers. (nvcc takes
# none of these; our one CUDA file, src/gpu/transpose_kernel.cu, is compiled with its defaults.)
add_library(snapcache_warnings INTERFACE)
target_compile_options(snapcache_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wformat=2 -Wimplicit-fallthrough -Wmissing-declarations>
  # GCC 13 flags fmt 9's own argument handling as dangling; fmt comes in as -I (see
  # SnapcacheDependencies.cmake), so its headers are not exempt as system headers are.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,13>>:-Wno-dangling-reference>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${SNAPCACHE_WERROR}>>:-Werror>)

add_library(snapcache_sanitizers INTERFACE)
if(SNAPCACHE_SANITIZE)
  target_compile_options(snapcache_sanitizers INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(snapcache_sanitizers INTERFACE -fsanitize=address,undefined)
endif()

function(snapcache_target_defaults target)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:snapcache_warnings>
                                          $<BUILD_INTERFACE:snapcache_sanitizers>)
endfunction()
