# Unity batches (KINTSUGI_UNITY): each target's C++ sources compiled in batches of
# KINTSUGI_UNITY_BATCH, one generated file per batch that includes them. A cold build then parses
# the heavy headers (JSON, CLI11, fmt, MPI, the standard library) and generates their inline code
# once per batch instead of once per file: about half the CPU time (docs/architecture.md,
# "Building").
#
# CMake's own UNITY_BUILD would do the batching, but its generated files include the sources by
# absolute path, so the same sources in another clone (CI's fresh clone, a worktree) are new
# text to ccache and never hit. These files include them by a path relative to the generated
# file: identical in every clone whose build folder lies at the same place in the checkout.
#
# A source is left out of the batches when it has the source property
# SKIP_UNITY_BUILD_INCLUSION, is not a .cpp file (.cu files go to nvcc, one by one), or its
# target has the property KINTSUGI_NO_UNITY.

set(KINTSUGI_UNITY_BATCH 8 CACHE STRING
    "Sources per unity batch (0: all of a target's sources in one batch)")

function(kintsugi_unity_target target)
  get_target_property(no_unity ${target} KINTSUGI_NO_UNITY)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  if(no_unity OR NOT sources)
    return()
  endif()
  set(batched "")
  set(kept "")
  foreach(source IN LISTS sources)
    get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${source_dir}")
    get_source_file_property(skip "${path}" TARGET_DIRECTORY ${target} SKIP_UNITY_BUILD_INCLUSION)
    if(skip OR NOT path MATCHES "\\.cpp$")
      list(APPEND kept "${source}")
    else()
      list(APPEND batched "${path}")
    endif()
  endforeach()
  list(LENGTH batched count)
  if(count LESS 2)
    return()
  endif()
  set(size ${KINTSUGI_UNITY_BATCH})
  if(size LESS_EQUAL 0)
    set(size ${count})
  endif()
  set(dir "${CMAKE_BINARY_DIR}/unity/${target}")
  set(generated "")
  set(batch 0)
  set(in_batch 0)
  set(text "")
  foreach(path IN LISTS batched)
    file(RELATIVE_PATH relative "${dir}" "${path}")
    string(APPEND text "#include \"${relative}\"\n")
    math(EXPR in_batch "${in_batch} + 1")
    if(in_batch EQUAL size)
      file(CONFIGURE OUTPUT "${dir}/batch_${batch}.cpp" CONTENT "${text}" @ONLY)
      list(APPEND generated "${dir}/batch_${batch}.cpp")
      math(EXPR batch "${batch} + 1")
      set(in_batch 0)
      set(text "")
    endif()
  endforeach()
  if(in_batch GREATER 0)
    file(CONFIGURE OUTPUT "${dir}/batch_${batch}.cpp" CONTENT "${text}" @ONLY)
    list(APPEND generated "${dir}/batch_${batch}.cpp")
  endif()
  set_property(TARGET ${target} PROPERTY SOURCES ${generated} ${kept})
endfunction()

# Every library and program defined in `directory` and the directories below it.
function(kintsugi_unity_all directory)
  if(NOT KINTSUGI_UNITY)
    return()
  endif()
  get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      kintsugi_unity_target(${target})
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    kintsugi_unity_all("${subdirectory}")
  endforeach()
endfunction()
