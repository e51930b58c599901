# Finds every third-party dependency and gives each one an imported target under the
# `snapcache_dep::` namespace, so the rest of the build never cares how it was found.
# Nothing here downloads anything: tools/setup.sh installs what is missing.

include_guard(GLOBAL)

# --- small helper: a header (and optionally a library) found by path --------------------------
function(snapcache_find_by_path target header)
  cmake_parse_arguments(ARG "" "LIBRARY" "" ${ARGN})
  string(MAKE_C_IDENTIFIER "${target}" var)
  find_path(${var}_INCLUDE_DIR ${header})
  if(NOT ${var}_INCLUDE_DIR)
    message(FATAL_ERROR "snapcache: ${header} not found; run tools/setup.sh or set CMAKE_PREFIX_PATH")
  endif()
  if(ARG_LIBRARY)
    find_library(${var}_LIBRARY ${ARG_LIBRARY})
    if(NOT ${var}_LIBRARY)
      message(FATAL_ERROR "snapcache: library ${ARG_LIBRARY} not found; run tools/setup.sh")
    endif()
    add_library(${target} UNKNOWN IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${var}_LIBRARY}")
  else()
    add_library(${target} INTERFACE IMPORTED GLOBAL)
  endif()
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${${var}_INCLUDE_DIR}")
endfunction()

# --- xxHash: the shared library, for its run-time dispatch --------------------------------------
# Every warm load hashes every byte it reads (bench/disk_read_bench.cpp --warm 1: inlined, XXH3 is
# compiled for SSE2 and checking more than halved one thread's read rate). Debian's libxxhash
# picks AVX2 or AVX-512 at run time (XXH3_64bits_dispatch, xxh_x86dispatch.h); where the library
# lacks the dispatch functions, the plain ones serve.
if(NOT TARGET snapcache_dep::xxhash)
  snapcache_find_by_path(snapcache_dep::xxhash xxhash.h LIBRARY xxhash)
  include(CheckSymbolExists)
  set(CMAKE_REQUIRED_INCLUDES "${snapcache_dep__xxhash_INCLUDE_DIR}")
  set(CMAKE_REQUIRED_LIBRARIES "${snapcache_dep__xxhash_LIBRARY}")
  set(CMAKE_REQUIRED_DEFINITIONS -DXXH_DISPATCH_DISABLE_REPLACE)
  check_symbol_exists(XXH3_64bits_dispatch "xxh_x86dispatch.h" SNAPCACHE_XXH_DISPATCH)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_DEFINITIONS)
  if(SNAPCACHE_XXH_DISPATCH)
    set_property(TARGET snapcache_dep::xxhash APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS SNAPCACHE_XXH_DISPATCH)
  endif()
endif()

# --- zstd -------------------------------------------------------------------------------------
if(NOT TARGET snapcache_dep::zstd)
  find_package(zstd CONFIG QUIET)
  if(TARGET zstd::libzstd_shared)
    add_library(snapcache_dep::zstd INTERFACE IMPORTED GLOBAL)
    target_link_libraries(snapcache_dep::zstd INTERFACE zstd::libzstd_shared)
  else()
    snapcache_find_by_path(snapcache_dep::zstd zstd.h LIBRARY zstd)
  endif()
endif()

# --- libsodium: Ed25519 signatures of archives (who made them) and BLAKE2b digests -------------
# Debian's libsodium-dev; never vendored: a crypto library takes its fixes from the distribution.
if(NOT TARGET snapcache_dep::sodium)
  snapcache_find_by_path(snapcache_dep::sodium sodium.h LIBRARY sodium)
endif()

# --- fmt --------------------------------------------------------------------------------------
# The torch wheel ships its own fmt (12.x) in its include directory, which comes before the
# system one in every target that links torch. To use exactly one fmt everywhere we use Debian's
# fmt header-only and put a forwarding include directory, holding only a link to Debian's fmt
# headers, in front of every other include path (see docs/development.md).
if(NOT TARGET snapcache_dep::fmt)
  find_path(SNAPCACHE_FMT_INCLUDE_DIR fmt/format.h NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH
            PATHS /usr/include /usr/local/include)
  if(NOT SNAPCACHE_FMT_INCLUDE_DIR)
    find_path(SNAPCACHE_FMT_INCLUDE_DIR fmt/format.h)
  endif()
  if(NOT SNAPCACHE_FMT_INCLUDE_DIR)
    message(FATAL_ERROR "snapcache: fmt headers not found; run tools/setup.sh")
  endif()
  file(STRINGS "${SNAPCACHE_FMT_INCLUDE_DIR}/fmt/core.h" _fmt_ver REGEX "#define FMT_VERSION ")
  string(REGEX MATCH "[0-9]+" SNAPCACHE_FMT_VERSION "${_fmt_ver}")
  set(_fwd "${CMAKE_BINARY_DIR}/fmt-forward")
  file(MAKE_DIRECTORY "${_fwd}")
  file(CREATE_LINK "${SNAPCACHE_FMT_INCLUDE_DIR}/fmt" "${_fwd}/fmt" SYMBOLIC)
  add_library(snapcache_dep::fmt INTERFACE IMPORTED GLOBAL)
  set_target_properties(snapcache_dep::fmt PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_fwd}"
    INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1;SNAPCACHE_EXPECTED_FMT_VERSION=${SNAPCACHE_FMT_VERSION}"
    # -I, not -isystem: -I directories are searched before every -isystem one, torch's included.
    SYSTEM FALSE)
  message(STATUS "snapcache: fmt ${SNAPCACHE_FMT_VERSION} (header-only) from ${SNAPCACHE_FMT_INCLUDE_DIR}")
endif()

# --- nlohmann/json (manifest-free places: config files, CLI --json, digest memo) -------------
if(NOT TARGET snapcache_dep::json)
  find_package(nlohmann_json 3 CONFIG QUIET)
  if(TARGET nlohmann_json::nlohmann_json)
    add_library(snapcache_dep::json INTERFACE IMPORTED GLOBAL)
    target_link_libraries(snapcache_dep::json INTERFACE nlohmann_json::nlohmann_json)
  else()
    snapcache_find_by_path(snapcache_dep::json nlohmann/json.hpp)
  endif()
endif()

# --- Threads ----------------------------------------------------------------------------------
find_package(Threads REQUIRED)

# The core-only builds (SNAPCACHE_CORE_ONLY, SNAPCACHE_FUZZ) have the store's layers only: no
# CUDA, no torch.
if(SNAPCACHE_CORE_ONLY OR SNAPCACHE_FUZZ)
  return()
endif()

# --- CUDA toolkit: the runtime, and nvcc for our one kernel (src/gpu/transpose_kernel.cu) ------
find_package(CUDAToolkit REQUIRED)

# --- libtorch, from the pinned PyPI wheel -----------------------------------------------------
file(STRINGS "${PROJECT_SOURCE_DIR}/cmake/torch-version" SNAPCACHE_TORCH_VERSION LIMIT_COUNT 1)
set(SNAPCACHE_TORCH_PYTHON "" CACHE STRING
    "python3 whose torch provides libtorch (default: tools/setup.sh's virtual environment, else python3)")
if(NOT SNAPCACHE_TORCH_PYTHON AND SKBUILD)
  # Built by pip: the extension module is for the interpreter that builds it, so its torch it is.
  set(SNAPCACHE_TORCH_PYTHON "${Python_EXECUTABLE}")
elseif(NOT SNAPCACHE_TORCH_PYTHON)
  if(DEFINED ENV{SNAPCACHE_DEPS_DIR})
    set(_deps "$ENV{SNAPCACHE_DEPS_DIR}")
  else()
    set(_deps "$ENV{HOME}/.cache/snapcache-deps")
  endif()
  if(EXISTS "${_deps}/venv-torch-${SNAPCACHE_TORCH_VERSION}/bin/python3")
    set(SNAPCACHE_TORCH_PYTHON "${_deps}/venv-torch-${SNAPCACHE_TORCH_VERSION}/bin/python3")
  else()
    find_program(SNAPCACHE_SYSTEM_PYTHON NAMES python3)  # e.g. the GPU machine's torch
    set(SNAPCACHE_TORCH_PYTHON "${SNAPCACHE_SYSTEM_PYTHON}")
  endif()
endif()
if(SNAPCACHE_TORCH_PYTHON)
  # Without PYTHONPATH: pip's isolated build environment sets it to hide the target environment's
  # packages, torch among them, from the build; CMake asks the target environment itself.
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE
                          "${SNAPCACHE_TORCH_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_torch_prefix)
    list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
  endif()
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  # Torch's CMake package reads this instead of CMAKE_CUDA_ARCHITECTURES; H100/H200 by default.
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
set(SNAPCACHE_TORCH_CUDA_ARCH_LIST "$ENV{TORCH_CUDA_ARCH_LIST}")
find_package(Torch REQUIRED)
# Torch's package enables CUDA and turns CMAKE_CUDA_ARCHITECTURES off; our kernel names its own
# targets: machine code for each GPU generation CUDA 13 builds for (Turing to Blackwell), and PTX
# of the newest for later ones. The GPU machine's preset builds for the H200's alone.
enable_language(CUDA)
set(SNAPCACHE_CUDA_ARCHITECTURES "75-real;80-real;86-real;89-real;90-real;100-real;120-real;120-virtual"
    CACHE STRING "GPU architectures of snapcache's own kernel (CMake's CUDA_ARCHITECTURES syntax)")
# The torch this build is for: the installed package's snapcacheConfig.cmake and the Python
# package's metadata (python/build_support) record it, and each refuses any other at use.
set(SNAPCACHE_TORCH_BUILT_VERSION "${Torch_VERSION}")
# The C++ build takes the pinned torch (cmake/torch-version: what CI tests). A Python build (pip,
# SKBUILD) takes the target environment's, from the minor series cmake/torch-supported names
# (first to last, inclusive): the wheel then requires exactly that torch.
file(STRINGS "${PROJECT_SOURCE_DIR}/cmake/torch-supported" _torch_supported REGEX "^[0-9]" LIMIT_COUNT 1)
string(REPLACE " " ";" _torch_supported "${_torch_supported}")
list(GET _torch_supported 0 SNAPCACHE_TORCH_SUPPORTED_FIRST)
list(GET _torch_supported 1 SNAPCACHE_TORCH_SUPPORTED_LAST)
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_minor "${Torch_VERSION}")
# SNAPCACHE_ALLOW_ANY_TORCH: the option, or the environment variable (what a pip build sets, since
# the wheel's metadata provider reads it too).
if(SNAPCACHE_ALLOW_ANY_TORCH OR "$ENV{SNAPCACHE_ALLOW_ANY_TORCH}")
  if(NOT Torch_VERSION VERSION_EQUAL SNAPCACHE_TORCH_VERSION)
    message(STATUS "snapcache: torch ${Torch_VERSION}, not the pinned ${SNAPCACHE_TORCH_VERSION} (SNAPCACHE_ALLOW_ANY_TORCH)")
  endif()
elseif(SKBUILD)
  if(_torch_minor VERSION_LESS SNAPCACHE_TORCH_SUPPORTED_FIRST OR _torch_minor VERSION_GREATER SNAPCACHE_TORCH_SUPPORTED_LAST)
    message(FATAL_ERROR "snapcache: the environment's torch is ${Torch_VERSION}; the Python package builds against "
                        "torch ${SNAPCACHE_TORCH_SUPPORTED_FIRST} to ${SNAPCACHE_TORCH_SUPPORTED_LAST} "
                        "(cmake/torch-supported); install one of those into the environment first, or set "
                        "SNAPCACHE_ALLOW_ANY_TORCH=1 in pip's environment to try another")
  endif()
elseif(NOT Torch_VERSION VERSION_EQUAL SNAPCACHE_TORCH_VERSION)
  message(FATAL_ERROR "snapcache: found torch ${Torch_VERSION}, pinned ${SNAPCACHE_TORCH_VERSION} "
                      "(cmake/torch-version); set -DSNAPCACHE_ALLOW_ANY_TORCH=ON to override")
endif()
message(STATUS "snapcache: building against torch ${Torch_VERSION} (${Torch_DIR})")
# The NCCL header torch's ProcessGroupNCCL was built against: the nvidia-nccl wheel's, beside torch.
# Without it the library's own NCCL group is left out (rank_group_from_environment says so).
find_path(SNAPCACHE_NCCL_INCLUDE_DIR nccl.h HINTS "${Torch_DIR}/../../../../nvidia/nccl/include" NO_DEFAULT_PATH)
if(NOT TARGET snapcache_dep::torch)
  add_library(snapcache_dep::torch INTERFACE IMPORTED GLOBAL)
  target_link_libraries(snapcache_dep::torch INTERFACE ${TORCH_LIBRARIES})
  # TORCH_CXX_FLAGS carries the C++ ABI define; keep it on everything that sees torch headers.
  separate_arguments(_torch_flags NATIVE_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(snapcache_dep::torch INTERFACE ${_torch_flags})
endif()
# The linker resolves libtorch's own dependencies where it finds them at run time (its RPATH: the
# nvidia wheels beside torch), not in the CUDA toolkit's directory, which comes first on the link
# line and holds older copies: torch 2.14's libtorch_cuda.so needs NCCL symbols that
# /usr/local/cuda's libnccl.so.2 lacks (undefined references when linking an executable). Linked
# by snapcache_dep::torch and by the shared library (for the programs that link it); the installed
# package's snapcacheConfig.cmake does the same for its consumers.
if(NOT TARGET snapcache_dep::torch_link)
  add_library(snapcache_dep::torch_link INTERFACE IMPORTED GLOBAL)
  file(GLOB _torch_wheel_lib_dirs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  foreach(_dir IN ITEMS "${TORCH_INSTALL_PREFIX}/lib" ${_torch_wheel_lib_dirs})
    if(IS_DIRECTORY "${_dir}")
      get_filename_component(_dir "${_dir}" REALPATH)
      target_link_options(snapcache_dep::torch_link INTERFACE "LINKER:-rpath-link,${_dir}")
    endif()
  endforeach()
  target_link_libraries(snapcache_dep::torch INTERFACE snapcache_dep::torch_link)
endif()
