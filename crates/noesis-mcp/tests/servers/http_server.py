"""An MCP server (official Python SDK) over streamable HTTP on
127.0.0.1:PORT/mcp: `echo` (read-only) and `fail` (reports an error).

With a second argument TOKEN, every HTTP request must carry
`Authorization: Bearer TOKEN` and `X-Team: noesis`, else it gets 401."""

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


def guarded(app, token):
    expected = {b"authorization": b"Bearer " + token.encode(), b"x-team": b"noesis"}

    async def guard(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if any(headers.get(k) != v for k, v in expected.items()):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guard


if __name__ == "__main__":
    port = int(sys.argv[1])
    if len(sys.argv) > 2:
        import uvicorn

        app = guarded(server.streamable_http_app(), sys.argv[2])
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)
