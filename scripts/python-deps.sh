# Sourced by test.sh: the Python packages the tests drive noesis with.
#   install_mcp_client   the official MCP Python SDK, pinned, in a virtual
#                        environment kept between runs; exports NOESIS_MCP_PYTHON,
#                        the interpreter tests/mcp.rs runs its client with.
#   install_pytest       pytest, pinned, in a virtual environment kept between
#                        runs; exports NOESIS_PYTEST, the pytest program the
#                        `noesis solve` scenario tests run as a project's tests.

MCP_CLIENT_PACKAGE="mcp==2.3.0"

install_mcp_client() {
  local venv="${NOESIS_MCP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/mcp-client}"
  local python="$venv/bin/python"
  if [ -x "$python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$MCP_CLIENT_PACKAGE" ] \
    && "$python" -c 'import mcp' >/dev/null 2>&1; then
    echo "==> MCP client: $MCP_CLIENT_PACKAGE in $venv (cached)" >&2
  else
    echo "==> MCP client: installing $MCP_CLIENT_PACKAGE into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" >&2
    "$python" -m pip install --disable-pip-version-check -q "$MCP_CLIENT_PACKAGE" >&2
    echo "$MCP_CLIENT_PACKAGE" > "$venv/.installed"
  fi
  export NOESIS_MCP_PYTHON="$python"
}

PYTEST_PACKAGE="pytest==9.2.0"

install_pytest() {
  local venv="${NOESIS_PYTEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/pytest}"
  local python="$venv/bin/python"
  if [ -x "$python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$PYTEST_PACKAGE" ] \
    && "$python" -m pytest --version >/dev/null 2>&1; then
    echo "==> pytest: $PYTEST_PACKAGE in $venv (cached)" >&2
  else
    echo "==> pytest: installing $PYTEST_PACKAGE into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" >&2
    "$python" -m pip install --disable-pip-version-check -q "$PYTEST_PACKAGE" >&2
    echo "$PYTEST_PACKAGE" > "$venv/.installed"
  fi
  export NOESIS_PYTEST="$venv/bin/pytest"
}
