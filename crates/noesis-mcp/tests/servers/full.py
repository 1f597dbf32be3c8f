"""An MCP server (official Python SDK) using what a client offers beside
tools: resources, a resource template, and prompts (listed two to a page, so a client must follow
the cursors), and tools that ask the client back — `roots` (roots/list),
`summarize` (sampling/createMessage) and `deploy` (elicitation/create)."""

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ListPromptsResult, ListResourcesResult, SamplingMessage, TextContent, ToolAnnotations

PAGE = 2


def page(items, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + PAGE
    return items[start:end], (str(end) if end < len(items) else None)


class Paged(MCPServer):
    async def _handle_list_resources(self, ctx, params):
        items, cursor = page(await self.list_resources(), params)
        return ListResourcesResult(resources=items, next_cursor=cursor)

    async def _handle_list_prompts(self, ctx, params):
        items, cursor = page(await self.list_prompts(), params)
        return ListPromptsResult(prompts=items, next_cursor=cursor)


server = Paged("full")


@server.resource("notes://readme", name="readme", description="What the project is", mime_type="text/plain")
def readme() -> str:
    return "noesis is a cognitive runtime"


@server.resource("notes://todo", name="todo", description="Open tasks", mime_type="text/plain")
def todo() -> str:
    return "- write the tests\n- ship"


@server.resource("notes://logo", name="logo", description="The logo", mime_type="image/png")
def logo() -> bytes:
    return b"\x89PNG\r\n\x1a\n"


@server.resource("notes://day/{day}", name="day", description="The notes of a day", mime_type="text/plain")
def day(day: str) -> str:
    return f"notes of {day}"


@server.prompt(name="review", description="Review a file")
def review(path: str, focus: str = "bugs") -> str:
    return f"Review {path}, looking for {focus}."


@server.prompt(name="greet", description="Say hello")
def greet(name: str) -> str:
    return f"Hello, {name}!"


@server.prompt(name="plan", description="Plan the work")
def plan() -> str:
    return "Make a plan."


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def roots(ctx: Context) -> str:
    """Lists the client's roots."""
    listed = await ctx.session.list_roots()
    return "\n".join(f"{r.uri} {r.name or ''}".strip() for r in listed.roots)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def summarize(text: str, ctx: Context) -> str:
    """Summarizes a text with the client's model."""
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
        max_tokens=50,
        system_prompt="Be brief.",
    )
    return f"{result.model} says: {result.content.text}"


class Confirm(BaseModel):
    name: str
    confirm: bool


@server.tool()
async def deploy(ctx: Context) -> str:
    """Deploys, after asking the person."""
    answer = await ctx.elicit("Deploy to production?", Confirm)
    if answer.action == "accept":
        return f"deployed by {answer.data.name}" if answer.data.confirm else "not confirmed"
    return f"deploy: {answer.action}"


if __name__ == "__main__":
    server.run()
