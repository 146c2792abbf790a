"""mcp-listen: give AI agents ears (microphone, VAD, whisper.cpp, Ollama) over MCP.

Importing the package imports nothing heavy: the server must answer `initialize`
as fast as a bare MCP server.
"""

__version__ = "0.1.0"
