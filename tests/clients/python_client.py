"""The MCP Python SDK's own client (`ClientSession` over stdio) calls one tool of mcp-listen
and prints the outcome as one JSON line, in the same shape as call_tool.mjs:
{"tools": [...], "result": <CallToolResult as on the wire>} or {"thrown": "<message>"}.

usage: python python_client.py <spec.json>   (spec: command, args, env, tool, arguments, timeoutMs)
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(spec: dict) -> dict:
    params = StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"])
    out: dict = {}
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out["tools"] = [tool.name for tool in (await session.list_tools()).tools]
            result = await session.call_tool(
                spec["tool"],
                spec["arguments"],
                read_timeout_seconds=spec.get("timeoutMs", 120000) / 1000,
            )
            out["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    except Exception as exc:  # noqa: BLE001 - the test reads what the client threw
        causes = getattr(exc, "exceptions", None) or [exc]  # an ExceptionGroup names its causes
        out["thrown"] = "; ".join(f"{type(cause).__name__}: {cause}" for cause in causes)
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as spec_file:
        print(json.dumps(anyio.run(main, json.load(spec_file))), flush=True)
