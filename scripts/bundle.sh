#!/usr/bin/env bash
# Writes dist/kintsugi-<version>-linux-x86_64.tar.gz: kintsugi and its GPU tests built with the
# CUDA backend, every shared library they need beyond the C/C++ runtime and the CUDA driver and
# toolkit libraries (libcuda, cuBLASLt, NCCL: the GPU machine has its own), the OpenMPI runtime tree
# under a prefix that mirrors /usr, launchers that set LD_LIBRARY_PATH and OPAL_PREFIX, and
# bench/gpu_check.sh with the PyTorch peer. Unpack it anywhere; run bench/gpu_check.sh in it.
#
#   scripts/bundle.sh              configures and builds build-bundle/ (CUDA on, no -march=native,
#                                  rpath $ORIGIN/../lib), then packs it
#   scripts/bundle.sh BUILD_DIR    packs an existing build (it must have been built with CUDA)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$repo/build-bundle}"
if [[ $# -eq 0 ]]; then
  # Portable code for the GPU machine's CPU; the binaries find the bundled libraries themselves.
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKINTSUGI_CUDA=ON \
    -DKINTSUGI_NATIVE=OFF -DKINTSUGI_BENCH=OFF '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' >/dev/null
  cmake --build "$build" -j "$(nproc)" --target kintsugi kintsugi_gpu_tests check_run
fi
for exe in kintsugi tests/gpu/kintsugi_gpu_tests tests/check_run; do
  [[ -x "$build/$exe" ]] || { echo "bundle: $build/$exe is missing: build it first" >&2; exit 1; }
done
if ! grep -q '^KINTSUGI_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "bundle: $build was configured without -DKINTSUGI_CUDA=ON" >&2
  exit 1
fi

version="$(sed -n 's/^project(kintsugi VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
name="kintsugi-$version-linux-x86_64"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
mkdir -p "$root"/{bin,libexec,lib,bench/pytorch,mpi/usr/bin,mpi/usr/lib/x86_64-linux-gnu,mpi/usr/share,mpi/etc}

# Libraries not to carry: the C/C++ runtime (every Linux has it) and the CUDA driver/toolkit
# libraries (they must match the GPU machine's driver; it has them in /usr/local/cuda/lib64).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcudnn|libnvidia|libnccl)'
copy_deps() {  # the non-system shared libraries of each file given, into lib/
  ldd "$@" 2>/dev/null | awk '/=> \//{print $1, $3}' | sort -u | while read -r soname path; do
    [[ "$soname" =~ $skip ]] && continue
    [[ -e "$root/lib/$soname" ]] || cp -L "$path" "$root/lib/$soname"
  done
}

cp "$build/kintsugi" "$build/tests/gpu/kintsugi_gpu_tests" "$build/tests/check_run" "$root/libexec/"
copy_deps "$root/libexec/kintsugi" "$root/libexec/kintsugi_gpu_tests" "$root/libexec/check_run"

# The OpenMPI runtime: its plug-ins and help files where OPAL_PREFIX=mpi/usr makes it look.
cp -a /usr/lib/x86_64-linux-gnu/openmpi "$root/mpi/usr/lib/x86_64-linux-gnu/"
cp -a /usr/share/openmpi "$root/mpi/usr/share/"
cp -a /etc/openmpi "$root/mpi/etc/"
cp -L /usr/bin/orterun /usr/bin/orted "$root/mpi/usr/bin/"
ln -s orterun "$root/mpi/usr/bin/mpirun"
ln -s orterun "$root/mpi/usr/bin/mpiexec"
mapfile -t plugins < <(find "$root/mpi/usr/lib/x86_64-linux-gnu/openmpi" -name '*.so' -type f)
copy_deps "$root/mpi/usr/bin/orterun" "$root/mpi/usr/bin/orted" "${plugins[@]}"

# One launcher, linked under every program's name: sets the environment, runs the program.
cat >"$root/bin/launch" <<'EOF'
#!/usr/bin/env bash
# Runs a program of this kintsugi bundle with its libraries and OpenMPI tree.
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$here/mpi/usr"
export PATH="$here/bin:$PATH"
program="$(basename "$0")"
case "$program" in
  mpirun | mpiexec | orted) exec "$here/mpi/usr/bin/$program" "$@" ;;
  *) exec "$here/libexec/$program" "$@" ;;
esac
EOF
chmod +x "$root/bin/launch"
for program in kintsugi kintsugi_gpu_tests check_run mpirun mpiexec orted; do
  ln -s launch "$root/bin/$program"
done

cp "$repo/bench/gpu_check.sh" "$repo/bench/gpu_layouts.sh" "$repo/bench/transformers_check.sh" \
  "$repo/bench/transformers_folder_check.sh" "$root/bench/"
cp "$repo/bench/pytorch/gpt2_step_cuda.py" "$repo/bench/pytorch/transformers_load.py" \
  "$repo/bench/pytorch/transformers_save_sharded.py" "$root/bench/pytorch/"
# The transformers check trains tiny models on Brown: the configs, and the fetched token files
# and tokenizers when this checkout has them (scripts/fetch_data.sh).
cp -r "$repo/configs" "$root/"
if [[ -f "$repo/data/brown/llama2/val.bin" ]]; then
  mkdir -p "$root/data/brown/llama2"
  cp "$repo"/data/brown/{train,val}.bin "$root/data/brown/"
  cp "$repo"/data/brown/llama2/{train,val}.bin "$root/data/brown/llama2/"
  cp -r "$repo/data/gpt2-tokenizer" "$repo/data/llama2-tokenizer" "$root/data/"
fi
git -C "$repo" describe --always --dirty >"$root/COMMIT" 2>/dev/null || echo unknown >"$root/COMMIT"

mkdir -p "$repo/dist"
tar -C "$stage" -czf "$repo/dist/$name.tar.gz" "$name"
echo "wrote dist/$name.tar.gz ($(du -h "$repo/dist/$name.tar.gz" | cut -f1))"
