# The `snapcache` command prints only through tools/snapcache/output.h (Table, say, say_to,
# print_json), which escape what they print: a command that wrote with fmt::print, printf, puts or
# a stream would put names from caches and archives on the terminal raw. Run with
# -DSOURCE_DIR=<repository>.
cmake_policy(SET CMP0057 NEW)  # IN_LIST
file(GLOB sources "${SOURCE_DIR}/tools/snapcache/*.cpp" "${SOURCE_DIR}/tools/snapcache/commands/*.cpp")
set(allowed output.cpp progress.cpp)  # the helpers themselves, and the bar's own control codes
set(found "")
foreach(source IN LISTS sources)
  get_filename_component(name "${source}" NAME)
  if(name IN_LIST allowed)
    continue()
  endif()
  file(STRINGS "${source}" lines REGEX "fmt::print|std::f?puts|f?printf|std::cout|std::cerr|fwrite|::write\\(")
  foreach(line IN LISTS lines)
    string(APPEND found "\n  ${name}: ${line}")
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "print through tools/snapcache/output.h (say, Table), which escapes names:${found}")
endif()
