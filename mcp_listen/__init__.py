"""mcp-listen: give AI agents ears (microphone, VAD, whisper.cpp, Ollama) over MCP.

Importing the package imports nothing heavy: the server must answer `initialize`
as fast as a bare MCP server.
"""

__version__ = "0.1.0"


def package_version() -> str:
    """The installed distribution's version (what pip, pipx or uvx installed), else the source tree's.

    The one answer to "which mcp-listen is this": `--version`, `doctor` and the server's
    serverInfo.version all print it, so they cannot disagree.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp-listen")
    except PackageNotFoundError:
        return __version__
