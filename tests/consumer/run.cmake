# ctest driver: install the build tree into a scratch prefix, build the consumer against it, run it.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DTORCH_PREFIX=... [-DCXX_FLAGS=...] -P run.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
set(flags "")
if(CXX_FLAGS)  # a sanitized build's library needs the consumer built with the same sanitizers
  set(flags "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
endif()
run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DTorch_DIR=${TORCH_PREFIX}/Torch" ${flags})
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer" "${WORK_DIR}/cache")

# A consumer whose torch is not the one snapcache was built against is refused at configure time,
# with a message that names both versions (a stand-in Torch package of another version).
file(WRITE "${WORK_DIR}/other-torch/TorchConfig.cmake" "set(TORCH_LIBRARIES \"\")\n")
file(WRITE "${WORK_DIR}/other-torch/TorchConfigVersion.cmake"
     "set(PACKAGE_VERSION \"1.99.0\")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/build-other-torch" -G Ninja
                        "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DTorch_DIR=${WORK_DIR}/other-torch"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \t\r\n]+" " " err "${err}")
if(rc EQUAL 0 OR NOT err MATCHES "was built against torch [0-9.]+ and needs exactly that torch; this project found torch 1\\.99\\.0")
  message(FATAL_ERROR "a consumer with torch 1.99.0 was not refused as it should be (${rc}):\n${out}\n${err}")
endif()
message(STATUS "consumer with another torch refused: ok")
