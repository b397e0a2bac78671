# The library is one static target per folder of src/kintsugi, layered (docs/design.md principle 8):
#
#   core
#   backend (cpu/, cuda/)   comm (mpi/)   data
#   model   optim
#   parallel
#   checkpoint   plan
#   train
#   cli (the program), tests, bench
#
# A folder may use the folders below it and nothing else. The build enforces it: each target
# compiles against its own include directory, build/layers/<target>/kintsugi/, holding links to
# exactly the folders it may use, so `#include "kintsugi/<folder>/..."` of a folder above it is
# "file not found". Only the program, tests and benchmarks see all of src/.

# kintsugi_layer(NAME <target> DIR <folder under src/kintsugi> [SEES <folders>...]
#                [LINKS <targets>...])
# SEES lists every folder whose headers the target may include (its own folder is added);
# LINKS the libraries it calls into.
function(kintsugi_layer)
  cmake_parse_arguments(L "" "NAME;DIR" "SEES;LINKS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kintsugi/${L_DIR}/*.cpp)
  add_library(${L_NAME} STATIC ${sources})
  set(view ${CMAKE_BINARY_DIR}/layers/${L_NAME}/kintsugi)
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  string(REGEX REPLACE "/.*" "" own ${L_DIR})  # backend/cpu sees backend/
  foreach(folder ${own} ${L_SEES})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/kintsugi/${folder} ${view}/${folder} SYMBOLIC)
  endforeach()
  target_include_directories(${L_NAME} PUBLIC ${CMAKE_BINARY_DIR}/layers/${L_NAME})
  target_link_libraries(${L_NAME} PUBLIC ${L_LINKS})
endfunction()
