# The loader's surface stays small (issue 20): a loader that includes <snapcache/config.h> and
# <snapcache/pipeline.h> compiles, sees at most seven public headers besides export.h and
# version.h (config, pipeline, dtype, key, named_tensors, status, store), and no header for people who extend snapcache (snapcache/extend/) nor one that
# describes the bytes of an entry (manifest.h, safetensors*.h); nor does any public header it
# reaches define a format or extension type, nor the store's own outcome vocabulary (a loader's is
# Status and the load's path; snapcache/extend/store_access.h has the store's): a forward
# declaration is fine, naming costs nothing.
#
#   cmake -DCXX=... -DINCLUDES="dir|dir|..." -DSOURCE=loader_example.cpp -P check_surface.cmake
set(max_headers 7)
set(forbidden_headers manifest.h safetensors.h safetensors_header.h)
set(forbidden_types Manifest DataFile StorageRecord TensorRecord StoredFile StoredBytes PendingTranspose HostStorage
    HostStorages TierAnswer Tier Uploader PostLoadMethod SafetensorsHeader
    # the store's vocabulary
    LookupResult LookupOutcome PublishResult PublishOutcome Snapshot VerifyPolicy StorageSource PublishOptions
    EvictedEntry ShapeCheck)
# Functions of the store's vocabulary, declared nowhere a loader reaches.
set(forbidden_functions describe_evictions check_expected_layout)

string(REPLACE "|" ";" includes "${INCLUDES}")
set(flags -std=c++20)
foreach(dir IN LISTS includes)
  list(APPEND flags "-I${dir}")
endforeach()

# -H lists every header opened, one per line, dots giving the depth.
execute_process(COMMAND "${CXX}" ${flags} -fsyntax-only -H "${SOURCE}"
                RESULT_VARIABLE rc ERROR_VARIABLE tree OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} does not compile with the loader's headers alone:\n${tree}")
endif()
string(REGEX MATCHALL "[^\n ]*/snapcache/[^\n ]+\\.h" opened "${tree}")
set(headers "")
foreach(path IN LISTS opened)
  string(REGEX REPLACE ".*/snapcache/" "" name "${path}")
  if(NOT name MATCHES "^(export|version)\\.h$")
    list(APPEND headers "${name}")
  endif()
endforeach()
list(REMOVE_DUPLICATES headers)
list(SORT headers)
list(LENGTH headers count)
string(REPLACE ";" " " shown "${headers}")
message(STATUS "the loader's public headers (${count}): ${shown}")

set(problems "")
if(count GREATER max_headers)
  string(APPEND problems "${count} public headers, more than ${max_headers}\n")
endif()
foreach(name IN LISTS headers)
  list(FIND forbidden_headers "${name}" at)
  if(name MATCHES "^extend/" OR NOT at EQUAL -1)
    string(APPEND problems "reaches ${name}, which is not the loader's\n")
  endif()
endforeach()

# Definitions, in the preprocessed text of the public headers only (torch defines types of its own).
execute_process(COMMAND "${CXX}" ${flags} -E -P "${SOURCE}" RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "preprocessing ${SOURCE} failed")
endif()
string(FIND "${text}" "namespace snapcache" first)
string(SUBSTRING "${text}" ${first} -1 text)
foreach(type IN LISTS forbidden_types)
  if(text MATCHES "(enum class|struct|class)( SNAPCACHE_API| \\[\\[gnu::visibility\\(\"default\"\\)\\]\\])? ${type}[ \n]*(final[ \n]*)?[{:]")
    string(APPEND problems "defines ${type}\n")
  endif()
endforeach()
foreach(function IN LISTS forbidden_functions)
  if(text MATCHES "[^A-Za-z0-9_]${function}[ \n]*\\(")
    string(APPEND problems "declares ${function}\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "the loader's surface is too wide:\n${problems}")
endif()
