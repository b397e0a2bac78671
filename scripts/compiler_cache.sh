# Sourced by scripts/build.sh and scripts/test.sh: compile through ccache where it is installed
# (scripts/setup.sh installs it), so that a rebuild of unchanged sources, in this clone or in
# another clone of the repository, takes seconds instead of minutes. Sets the array
# `compiler_cache_flags` for CMake (empty without ccache; KINTSUGI_CCACHE=0 clears the launcher).
#
# Paths under the repository enter the cache's keys relative to it (CCACHE_BASEDIR), so two
# clones at different places share their entries; a user's own CCACHE_* settings win. ccache
# hashes the compiler, its flags and every header read, so a hit is the object the compiler
# would have produced.
compiler_cache_flags=()
if [[ "${KINTSUGI_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null; then
  # Given to the launcher itself (not only exported here), so that a later `cmake --build build`
  # or `ninja -C build` in a shell without them still keys the cache relative to the clone.
  launcher="env;CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo};CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1};ccache"
  compiler_cache_flags=("-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher"
                        "-DCMAKE_C_COMPILER_LAUNCHER=$launcher"
                        "-DCMAKE_CUDA_COMPILER_LAUNCHER=$launcher")
elif [[ "${KINTSUGI_CCACHE:-1}" == 0 ]]; then  # also in a build folder configured with it
  compiler_cache_flags=(-DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_C_COMPILER_LAUNCHER=
                        -DCMAKE_CUDA_COMPILER_LAUNCHER=)
fi
