"""The baseline for startup: the MCP SDK's own server with no tools, over stdio.

python bench/bare_server.py lowlevel    # mcp.server.lowlevel.Server
python bench/bare_server.py mcpserver   # mcp.server.MCPServer (the former FastMCP)
"""

from __future__ import annotations

import sys


def lowlevel() -> None:
    import anyio
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        server = Server("bare")
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def mcpserver() -> None:
    from mcp.server import MCPServer

    MCPServer("bare").run()


if __name__ == "__main__":
    {"lowlevel": lowlevel, "mcpserver": mcpserver}[sys.argv[1] if len(sys.argv) > 1 else "lowlevel"]()
