"""An MCP server (official Python SDK) whose tools change: calling
`unlock` adds the tool `shout` and tells the client its list changed."""

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("changing")


def shout(word: str) -> str:
    """Upper-cases a word."""
    return word.upper()


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def unlock(ctx: Context) -> str:
    """Makes `shout` available."""
    server.add_tool(shout, name="shout", annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.session.send_tool_list_changed()
    return "unlocked"


if __name__ == "__main__":
    server.run()
