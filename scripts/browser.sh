# Sourced by test.sh: the browser the dashboard's tests drive.
#   install_browser   Debian's Chromium (package `chromium`, installed with
#                     apt when missing) and playwright-core, pinned, from the
#                     npm registry into a folder kept between runs; exports
#                     NOESIS_CHROMIUM and NOESIS_PLAYWRIGHT (the folder whose
#                     node_modules holds playwright-core).

PLAYWRIGHT_PACKAGE="playwright-core@1.65.1"

install_browser() {
  if [ ! -x /usr/bin/chromium ]; then
    echo "==> browser: installing Debian's chromium" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2 \
      || { $sudo apt-get update -q >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2; }
  fi
  export NOESIS_CHROMIUM=/usr/bin/chromium
  local dir="${NOESIS_PLAYWRIGHT:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/playwright}"
  if [ "$(cat "$dir/.installed" 2>/dev/null)" = "$PLAYWRIGHT_PACKAGE" ] && [ -d "$dir/node_modules/playwright-core" ]; then
    echo "==> browser: $PLAYWRIGHT_PACKAGE in $dir (cached), $($NOESIS_CHROMIUM --version 2>/dev/null)" >&2
  else
    echo "==> browser: installing $PLAYWRIGHT_PACKAGE into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$dir" && echo '{"private": true}' > package.json \
      && npm install --no-audit --no-fund --silent "$PLAYWRIGHT_PACKAGE" >&2)
    echo "$PLAYWRIGHT_PACKAGE" > "$dir/.installed"
  fi
  export NOESIS_PLAYWRIGHT="$dir"
}
