"""An MCP server (official Python SDK) over streamable HTTP on
127.0.0.1:PORT/mcp: `echo` (read-only) and `fail` (reports an error)."""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("http-echo")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Says the text back."""
    return f"echo: {text}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
