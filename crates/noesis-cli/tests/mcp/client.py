"""Drives `noesis mcp` with the official MCP Python SDK (an implementation
noesis did not write) and prints what the server answered as one JSON
object on stdout; tests/mcp.rs checks it.

Usage: client.py NOESIS_BINARY WORK_DIR
"""

import json
import sys

import anyio
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def protocol_error(call):
    """The JSON-RPC error a call ends in, or None when it succeeds."""
    try:
        await call
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message}
    return None


async def main(noesis: str, work: str) -> None:
    server = StdioServerParameters(
        command=noesis,
        args=["mcp", "--provider", "test"],
        # The SDK passes only a safe subset of the caller's environment.
        env={"HOME": work, "NO_COLOR": "1"},
        cwd=work,
    )
    report = {}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["initialize"] = dump(init)
            await session.send_ping()
            report["tools"] = dump(await session.list_tools())
            # call_tool checks structuredContent against the tool's outputSchema.
            report["run_ok"] = dump(
                await session.call_tool("run", {"module": "code-simplifier", "input": {"code": "x = 1 + 0"}})
            )
            report["run_missing"] = dump(await session.call_tool("run", {"module": "no-such-module"}))
            report["run_no_module"] = dump(await session.call_tool("run", {"input": {}}))
            report["list"] = dump(await session.call_tool("list", {}))
            report["unknown_tool"] = await protocol_error(session.call_tool("no-such-tool", {}))
            report["resources"] = dump(await session.list_resources())
            report["read"] = dump(await session.read_resource("module://code-simplifier"))
            report["read_missing"] = await protocol_error(session.read_resource("module://no-such-module"))
            # Each module is a prompt: what editors list as slash commands.
            report["prompts"] = dump(await session.list_prompts())
            report["prompt"] = dump(
                await session.get_prompt("meeting-details", {"message": "Lunch with Ada on Friday at noon"})
            )
            report["prompt_missing_argument"] = await protocol_error(session.get_prompt("meeting-details", {}))
            report["prompt_unknown"] = await protocol_error(session.get_prompt("no-such-module", {}))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
