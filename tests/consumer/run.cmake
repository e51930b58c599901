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
