# Sourced by test.sh: third-party MCP servers the agent's MCP client is
# tested against, pinned, installed once and kept between runs.
#   install_mcp_servers  exports NOESIS_MCP_SERVER_FILESYSTEM (the reference
#                        filesystem server, npm), NOESIS_MCP_SERVER_GIT and
#                        NOESIS_MCP_SERVER_TIME (PyPI): each a program to run.

MCP_SERVERS_NPM="@modelcontextprotocol/server-filesystem@2026.8.31"
MCP_SERVERS_PYPI="mcp-server-git==2026.10.19 mcp-server-time==2026.10.19"

install_mcp_servers() {
  local root="${NOESIS_MCP_SERVERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/noesis/mcp-servers}"
  local pinned="$MCP_SERVERS_NPM $MCP_SERVERS_PYPI"
  local fs="$root/npm/node_modules/.bin/mcp-server-filesystem"
  local git="$root/venv/bin/mcp-server-git" time="$root/venv/bin/mcp-server-time"
  if [ -x "$fs" ] && [ -x "$git" ] && [ -x "$time" ] && [ "$(cat "$root/.installed" 2>/dev/null)" = "$pinned" ]; then
    echo "==> MCP servers: $pinned in $root (cached)" >&2
  else
    if ! command -v npm >/dev/null 2>&1; then
      echo "error: npm not found; the MCP server tests need Node.js and npm (or set NOESIS_SKIP_MCP_SERVERS=1)" >&2
      return 2
    fi
    echo "==> MCP servers: installing $pinned into $root" >&2
    rm -rf "$root"
    mkdir -p "$root/npm"
    # --ignore-scripts: nothing of the package runs at install time.
    (cd "$root/npm" && npm init -y >/dev/null && npm install --no-audit --no-fund --ignore-scripts --silent \
      --save-exact "$MCP_SERVERS_NPM" >&2)
    python3 -m venv "$root/venv" >&2
    # shellcheck disable=SC2086
    "$root/venv/bin/python" -m pip install --disable-pip-version-check -q $MCP_SERVERS_PYPI >&2
    echo "$pinned" > "$root/.installed"
  fi
  export NOESIS_MCP_SERVER_FILESYSTEM="$fs" NOESIS_MCP_SERVER_GIT="$git" NOESIS_MCP_SERVER_TIME="$time"
}
