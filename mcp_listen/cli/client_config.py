"""Copy-paste configuration for MCP clients, so nobody writes a client's JSON from memory.

Every client starts the same stdio server; they differ only in where the entry lives and what
the surrounding JSON (or TOML, or command line) looks like. `render` builds the snippet for one
client and one way of launching the server (a runner). Standard library only: `mcp-listen config`
must work even where audio libraries are missing.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_listen.errors import InvalidArgument, temporary_launcher

SERVER_NAME = "mcp-listen"
PACKAGE = "mcp-listen"

SPEAK_SPEC = f"{PACKAGE}[speak]"
"""The package with the `speak` extra (Piper, GPL-3.0-or-later): speak_text and converse are served."""

RUNNERS = ("pipx", "uvx", "local")
"""pipx: `pipx run mcp-listen`; uvx: `uvx mcp-listen`; local: this interpreter with `-m mcp_listen`
(a checkout or any environment mcp-listen is installed in). With the speak extra, `pipx run --spec
'mcp-listen[speak]' mcp-listen` and `uvx --from 'mcp-listen[speak]' mcp-listen`: both take the command's
name apart from the package that provides it, which is how each says "with this extra"."""


@dataclass(frozen=True)
class Snippet:
    """What to paste (`text`, in `format`) and where it goes (`where`, for a person)."""

    client: str
    format: str
    """"json", "toml" or "shell"."""
    text: str
    where: str


def server_command(runner: str, python: str | None = None, *, speak: bool = False) -> list[str]:
    """The command line that starts the server over stdio for `runner`, with the speak extra if `speak`."""
    if runner == "pipx":
        return ["pipx", "run", "--spec", SPEAK_SPEC, PACKAGE] if speak else ["pipx", "run", PACKAGE]
    if runner == "uvx":
        return ["uvx", "--from", SPEAK_SPEC, PACKAGE] if speak else ["uvx", PACKAGE]
    if runner == "local":
        if python is None:
            _refuse_a_temporary_environment()
            if speak:
                _require_piper()
        # Not resolved: a venv's python is a symlink, and resolving it would leave the venv.
        return [os.path.abspath(python or sys.executable), "-m", "mcp_listen"]
    raise InvalidArgument(f"Unknown runner {runner!r}. Choose one of: {', '.join(RUNNERS)}.")


def _refuse_a_temporary_environment() -> None:
    """Under `pipx run` or `uvx` this interpreter lives in their cache, which they empty at will: a client
    pointed at it would stop starting the server one day, with nothing to say why."""
    launcher = temporary_launcher()
    if launcher is None:
        return
    raise InvalidArgument(
        f"--runner local would point the client at {launcher.runner}'s temporary environment ({sys.prefix}), "
        f"which {launcher.runner} deletes when it likes. Install mcp-listen ({launcher.install}), then run "
        f"`mcp-listen config CLIENT --runner local` from that install; or use --runner {launcher.runner}."
    )


def _require_piper() -> None:
    from mcp_listen.config.libraries import installed

    if not installed("piper"):
        raise InvalidArgument(
            f"--speak with --runner local needs Piper in this environment ({sys.prefix}), and it is not installed. "
            "Install the extra into it (pip install 'mcp-listen[speak]'), or use --runner pipx or uvx with --speak."
        )


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    """`NAME=VALUE` strings (from --env) as a dict; a malformed pair is a usage error."""
    env: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum():
            raise InvalidArgument(f"--env takes NAME=VALUE (e.g. WHISPER_MODEL_PATH=/models); got {pair!r}.")
        env[name] = value
    return env


def _entry(command: list[str], env: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {**extra, "command": command[0], "args": command[1:]}
    if env:
        entry["env"] = dict(env)
    return entry


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _mcp_servers(command: list[str], env: Mapping[str, str]) -> str:
    """The `mcpServers` shape Claude Desktop, Cursor, Windsurf and most other clients read."""
    return _json({"mcpServers": {SERVER_NAME: _entry(command, env)}})


def _vscode(command: list[str], env: Mapping[str, str]) -> str:
    return _json({"servers": {SERVER_NAME: _entry(command, env, type="stdio")}})


def _zed(command: list[str], env: Mapping[str, str]) -> str:
    return _json({"context_servers": {SERVER_NAME: _entry(command, env)}})


def _claude_code(command: list[str], env: Mapping[str, str]) -> str:
    # The name comes before -e: `-e` takes several values and would swallow a name after it.
    words = ["claude", "mcp", "add", SERVER_NAME]
    for name, value in env.items():
        words += ["-e", f"{name}={value}"]
    return _shell_join([*words, "--", *command])


def _shell_join(words: list[str]) -> str:
    if os.name == "nt":
        import subprocess

        return subprocess.list2cmdline(words)
    return shlex.join(words)


def _toml_string(value: str) -> str:
    """A TOML basic string; JSON's escapes (\\\\, \\", \\uXXXX) are valid TOML escapes."""
    return json.dumps(value, ensure_ascii=False)


def _codex(command: list[str], env: Mapping[str, str]) -> str:
    lines = [
        f"[mcp_servers.{SERVER_NAME}]",
        f"command = {_toml_string(command[0])}",
        "args = [" + ", ".join(_toml_string(a) for a in command[1:]) + "]",
    ]
    if env:
        pairs = ", ".join(f"{_toml_string(k)} = {_toml_string(v)}" for k, v in env.items())
        lines.append(f"env = {{ {pairs} }}")
    return "\n".join(lines)


@dataclass(frozen=True)
class _Client:
    format: str
    build: Callable[[list[str], Mapping[str, str]], str]
    where: str


CLIENTS: dict[str, _Client] = {
    "claude-code": _Client(
        "shell",
        _claude_code,
        "Run this in a terminal. Add `--scope user` after `add` to make it available in every project.",
    ),
    "claude-desktop": _Client(
        "json",
        _mcp_servers,
        "Merge into claude_desktop_config.json (Settings > Developer > Edit Config): macOS "
        "~/Library/Application Support/Claude/, Windows %APPDATA%\\Claude\\. Then restart Claude Desktop.",
    ),
    "cursor": _Client(
        "json", _mcp_servers, "Merge into ~/.cursor/mcp.json (every project) or .cursor/mcp.json (one project)."
    ),
    "vscode": _Client(
        "json",
        _vscode,
        "Merge into .vscode/mcp.json in the workspace, or run 'MCP: Open User Configuration' for every workspace.",
    ),
    "windsurf": _Client(
        "json", _mcp_servers, "Merge into ~/.codeium/windsurf/mcp_config.json, then refresh the MCP servers."
    ),
    "zed": _Client("json", _zed, "Merge into Zed's settings.json (command palette: 'zed: open settings')."),
    "chatgpt-desktop": _Client(
        "json",
        _mcp_servers,
        "ChatGPT adds MCP servers under Settings > Apps & Connectors (Developer mode). Builds that only accept a "
        "server URL cannot start a local stdio server such as mcp-listen: use Codex (`mcp-listen config codex`) "
        "or another client listed by `mcp-listen config --help`.",
    ),
    "codex": _Client(
        "toml",
        _codex,
        "Append to ~/.codex/config.toml (used by the Codex CLI, IDE extension and app).",
    ),
}


def render(
    client: str,
    runner: str = "pipx",
    env: Mapping[str, str] | None = None,
    *,
    python: str | None = None,
    speak: bool = False,
) -> Snippet:
    """The snippet that adds mcp-listen to `client`, launched by `runner` (with the speak extra if
    `speak`), with `env` set for the server."""
    spec = CLIENTS.get(client)
    if spec is None:
        raise InvalidArgument(f"Unknown client {client!r}. Choose one of: {', '.join(CLIENTS)}.")
    command = server_command(runner, python, speak=speak)
    return Snippet(client=client, format=spec.format, text=spec.build(command, dict(env or {})), where=spec.where)
