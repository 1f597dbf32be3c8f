# Sourced by test.sh: the tool that builds the book under docs/.
#   install_mdbook   mdbook, pinned, built from crates.io without its default
#                    features (serve, watch, search: `mdbook build` needs none
#                    of them) into ~/.cache/noesis/tools, reused when the
#                    pinned version is already there; puts it on PATH.

MDBOOK_VERSION="0.5.4"

install_mdbook() {
  local tools="${XDG_CACHE_HOME:-$HOME/.cache}/noesis/tools"
  if "$tools/bin/mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
    echo "==> book: mdbook $MDBOOK_VERSION in $tools (cached)" >&2
  else
    echo "==> book: installing mdbook $MDBOOK_VERSION into $tools" >&2
    # A build folder of its own, so the workspace's target directory holds
    # only the workspace; removed once the binary is installed.
    cargo install --locked --quiet --no-default-features --root "$tools" \
      --target-dir "$tools/build-mdbook" mdbook --version "$MDBOOK_VERSION" >&2
    rm -rf "$tools/build-mdbook"
  fi
  export PATH="$tools/bin:$PATH"
}
