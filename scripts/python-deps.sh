# Sourced by test.sh: the Python packages the tests drive noesis with.
#   install_mcp_client   the official MCP Python SDK, pinned, in a virtual
#                        environment kept between runs; exports NOESIS_MCP_PYTHON,
#                        the interpreter tests/mcp.rs runs its client with.
#   install_pytest       pytest, pinned, in a virtual environment kept between
#                        runs; exports NOESIS_PYTEST, the pytest program the
#                        `noesis solve` scenario tests run as a project's tests.

MCP_CLIENT_PACKAGE="mcp==2.3.0"
PYTEST_PACKAGE="pytest==9.2.0"

# pinned_venv LABEL VENV PACKAGE CHECK...: VENV holds exactly PACKAGE (pip),
# made again when it does not or when `VENV/bin/python CHECK...` fails.
pinned_venv() {
  local label="$1" venv="$2" package="$3"
  shift 3
  local python="$venv/bin/python"
  if [ -x "$python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$package" ] \
    && "$python" "$@" >/dev/null 2>&1; then
    echo "==> $label: $package in $venv (cached)" >&2
  else
    echo "==> $label: installing $package into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" >&2
    "$python" -m pip install --disable-pip-version-check -q "$package" >&2
    echo "$package" > "$venv/.installed"
  fi
}

install_mcp_client() {
  local venv="${NOESIS_MCP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/mcp-client}"
  pinned_venv "MCP client" "$venv" "$MCP_CLIENT_PACKAGE" -c 'import mcp'
  export NOESIS_MCP_PYTHON="$venv/bin/python"
}

install_pytest() {
  local venv="${NOESIS_PYTEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/pytest}"
  pinned_venv "pytest" "$venv" "$PYTEST_PACKAGE" -m pytest --version
  export NOESIS_PYTEST="$venv/bin/pytest"
}
