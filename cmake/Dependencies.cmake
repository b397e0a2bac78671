# Every dependency is a Debian package installed by scripts/setup.sh.
find_package(PkgConfig REQUIRED)
find_package(OpenMP REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(tomlplusplus 3 REQUIRED)
find_package(CLI11 2 REQUIRED)
find_package(fmt 9 REQUIRED)

# OpenBLAS, its OpenMP build explicitly: it shares the OpenMP runtime with our own kernels,
# so the two never oversubscribe the cores.
set(KINTSUGI_OPENBLAS_DIR /usr/lib/x86_64-linux-gnu/openblas-openmp CACHE PATH
    "Directory holding the OpenMP build of OpenBLAS")
find_library(OPENBLAS_LIBRARY NAMES openblas PATHS ${KINTSUGI_OPENBLAS_DIR} NO_DEFAULT_PATH)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-openmp
          NO_DEFAULT_PATH)
if(NOT OPENBLAS_LIBRARY OR NOT OPENBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup.sh "
                      "(apt-get install libopenblas-openmp-dev)")
endif()
add_library(kintsugi::openblas INTERFACE IMPORTED)
target_include_directories(kintsugi::openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(kintsugi::openblas INTERFACE ${OPENBLAS_LIBRARY})

pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
add_library(kintsugi::xxhash ALIAS PkgConfig::XXHASH)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
add_library(kintsugi::pcre2 ALIAS PkgConfig::PCRE2)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
add_library(kintsugi::utf8proc ALIAS PkgConfig::UTF8PROC)
