"""Real MCP clients, nobody here wrote them, drive the real server end to end.

Each client runs as its own process (tests/clients/): the TypeScript SDK 1.26.x and the newest
1.x (`@modelcontextprotocol/sdk`), the newest 2.x (`@modelcontextprotocol/client`), the MCP
Inspector CLI 2.12.0, and the Python SDK's `ClientSession`. The node packages are installed from
the npm registry once per session into tests/assets/node/<name> (git-ignored), hence `slow`.

Every tool's success and its error outcomes are asserted as the client reports them: an error
is an isError result whose first text says "Error: <the real message>" (never a client's schema
complaint) and whose JSON text block carries the stable `error.code` a program branches on.
The TS SDK 1.x client validates a success's structuredContent against the tool's outputSchema
itself (and threw on every error result while errors carried structuredContent).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import audio_assets
import pytest
from fake_ollama import refused_url
from rpc import ALL_TOOLS, SERVER_CMD, server_env

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # the tests folder
NODE_CACHE = HERE / "assets" / "node"
SCRIPTS = HERE / "clients"
QUESTION = "What is the capital city of France?"
CALL_TIMEOUT_S = 180


@dataclass(frozen=True)
class NodeClient:
    folder: str
    package: str
    spec: str
    flavour: str | None  # call_tool.mjs flavour; None = the Inspector CLI


NODE_CLIENTS = {
    "ts-sdk-1.26": NodeClient("sdk-1.26", "@modelcontextprotocol/sdk", "~1.26.0", "sdk1"),
    "ts-sdk-1.x": NodeClient("sdk-1.x", "@modelcontextprotocol/sdk", "^1", "sdk1"),
    "ts-client-2.x": NodeClient("client-2.x", "@modelcontextprotocol/client", "^2", "sdk2"),
    "inspector-2.12.0": NodeClient("inspector-2.12.0", "@modelcontextprotocol/inspector", "2.12.0", None),
}
CLIENTS = [*NODE_CLIENTS, "python-sdk"]


def _npm_install(client: NodeClient) -> str:
    """Install (or bring up to date) one client in its cache folder; its installed version."""
    folder = NODE_CACHE / client.folder
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "package.json"
    if not manifest.exists():
        manifest.write_text('{"private": true}\n')
    command = ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", f"{client.package}@{client.spec}"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"npm could not install {client.package}@{client.spec}: {done.stderr[-2000:]}")
    installed = json.loads((folder / "node_modules" / client.package / "package.json").read_text())
    return installed["version"]


@pytest.fixture(scope="session")
def node_clients() -> dict[str, str]:
    """Every node client installed from the registry, once per session; name -> version."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: install Node.js 20+ (with npm) to run the client tests")
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    # Parallel workers (tools/dev test) share the cache: one installs while the others wait, then find
    # it up to date.
    with open(NODE_CACHE / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        versions = {name: _npm_install(client) for name, client in NODE_CLIENTS.items()}
    print(f"\nMCP clients under test: {versions}")
    return versions


# ----------------------------------------------------------------------------------- running clients


def _client_command(name: str, spec_path: Path, spec: dict[str, Any]) -> list[str]:
    if name == "python-sdk":
        return [sys.executable, str(SCRIPTS / "python_client.py"), str(spec_path)]
    client = NODE_CLIENTS[name]
    folder = NODE_CACHE / client.folder
    if client.flavour is not None:
        return ["node", str(SCRIPTS / "call_tool.mjs"), client.flavour, str(folder), str(spec_path)]
    inspector = folder / "node_modules" / ".bin" / "mcp-inspector"
    command = [str(inspector), "--cli"]
    for key, value in spec["env"].items():  # the Inspector gives the server only what -e names
        command += ["-e", f"{key}={value}"]
    command += ["--method", "tools/call", "--tool-name", spec["tool"]]
    for key, value in spec["arguments"].items():
        command += ["--tool-arg", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return [*command, "--", spec["command"], *spec["args"]]


def _read_outcome(name: str, done: subprocess.CompletedProcess) -> dict[str, Any]:
    """What the client printed, as {"result": ...} or {"thrown": ...}."""
    if name.startswith("inspector"):
        # exit 0: a result; exit 5: "tool returned isError" with the result still printed on stdout
        try:
            return {"result": json.loads(done.stdout)}
        except ValueError:
            return {"thrown": f"exit {done.returncode}: {done.stdout[-1000:]} {done.stderr[-1000:]}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"thrown": f"exit {done.returncode}: {done.stderr[-2000:]}"}
    return json.loads(lines[-1])


def recording_streams(vmic) -> int:
    """How many capture streams are open on the virtual microphone's source right now."""
    run = lambda *args: (  # noqa: E731
        subprocess.run(
            ["pactl", "list", "short", *args], env=vmic.child_env(), capture_output=True, text=True, timeout=10
        ).stdout
    )
    source = next(line.split("\t")[0] for line in run("sources").splitlines() if line.split("\t")[1] == "vmic")
    return sum(1 for line in run("source-outputs").splitlines() if line.split("\t")[1] == source)


def _speak_when_recording(proc: subprocess.Popen, vmic, clip: Path) -> None:
    """Play `clip` once the server holds the microphone open (twice in a row, 0.25 s apart:
    device enumeration opens streams only for a moment); never if the call ends first."""
    seen = 0
    while proc.poll() is None:
        seen = seen + 1 if recording_streams(vmic) else 0
        if seen >= 2:
            vmic.play(clip)
            return
        time.sleep(0.25)


def call(
    name: str,
    tool: str,
    arguments: dict[str, Any],
    env: dict[str, str],
    tmp_path: Path,
    *,
    vmic=None,
    clip: Path | None = None,
) -> dict[str, Any]:
    """One client process: start the server, list tools, call `tool`, report the outcome."""
    spec = {
        "command": SERVER_CMD[0],
        "args": SERVER_CMD[1:],
        "env": env,
        "tool": tool,
        "arguments": arguments,
        "timeoutMs": CALL_TIMEOUT_S * 1000,
    }
    spec_path = tmp_path / f"spec-{name}.json"
    spec_path.write_text(json.dumps(spec))
    client_env = {**env, "HOME": str(tmp_path / "client-home")}  # the Inspector keeps state in HOME
    proc = subprocess.Popen(
        _client_command(name, spec_path, spec),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=client_env,
    )
    speaker = None
    if clip is not None:
        speaker = threading.Thread(target=_speak_when_recording, args=(proc, vmic, clip), daemon=True)
        speaker.start()
    try:
        stdout, stderr = proc.communicate(timeout=CALL_TIMEOUT_S + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if speaker is not None:
        speaker.join(timeout=60)
    return _read_outcome(name, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))


# ----------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    tool: str
    arguments: dict[str, Any]
    code: str | None = None  # None: a success
    words: str = ""  # for an error: what its message must say
    speech: bool = False
    ollama: str = "ok"  # fake Ollama's mode, or "refused" for nothing listening

    def args(self, model_path: Path) -> dict[str, Any]:
        return {key: (str(model_path) if value == "<model>" else value) for key, value in self.arguments.items()}


SPOKEN = {"whisper_model": "<model>", "silence_ms": 500}
MISSING_MODEL = "/nonexistent/ggml-base.en.bin"
UNKNOWN_DEVICE = "ALSA:no such microphone"

CASES = {
    "list_audio_devices-ok": Case("list_audio_devices", {}),
    "list_audio_devices-invalid": Case("list_audio_devices", {"all": True}, "invalid_argument", "all"),
    "get_status-ok": Case("get_status", {}),
    "get_status-invalid": Case("get_status", {"verbose": True}, "invalid_argument", "verbose"),
    "capture_audio-ok": Case("capture_audio", {"duration_ms": 300}),
    "capture_audio-invalid": Case("capture_audio", {"duration_ms": 99}, "invalid_argument", "duration_ms"),
    "capture_audio-unknown-device": Case(
        "capture_audio", {"duration_ms": 300, "device": UNKNOWN_DEVICE}, "device_not_found", "list_audio_devices"
    ),
    "transcribe_voice-ok": Case("transcribe_voice", SPOKEN, speech=True),
    "transcribe_voice-invalid": Case("transcribe_voice", {"duration_ms": 600_001}, "invalid_argument", "duration_ms"),
    "transcribe_voice-unknown-device": Case(
        "transcribe_voice", {**SPOKEN, "device": UNKNOWN_DEVICE}, "device_not_found", "list_audio_devices"
    ),
    "transcribe_voice-missing-model": Case(
        "transcribe_voice", {"whisper_model": MISSING_MODEL}, "model_not_found", "models pull"
    ),
    "voice_query-ok": Case("voice_query", SPOKEN, speech=True),
    "voice_query-invalid": Case("voice_query", {"model": "x" * 201}, "invalid_argument", "model"),
    "voice_query-unknown-device": Case(
        "voice_query", {**SPOKEN, "device": UNKNOWN_DEVICE}, "device_not_found", "list_audio_devices"
    ),
    "voice_query-missing-model": Case(
        "voice_query", {"whisper_model": MISSING_MODEL}, "model_not_found", "models pull"
    ),
    "voice_query-ollama-unreachable": Case(
        "voice_query", SPOKEN, "ollama_unreachable", "ollama serve", speech=True, ollama="refused"
    ),
    "voice_query-empty-reply": Case("voice_query", SPOKEN, "empty_response", speech=True, ollama="empty"),
}


def _assert_error(outcome: dict[str, Any], case: Case) -> dict[str, Any]:
    """The client got an isError result: 'Error: <real message>' then the JSON with the stable code."""
    assert "thrown" not in outcome, f"the client threw instead of returning the error: {outcome['thrown']}"
    result = outcome["result"]
    assert result.get("isError") is True, result
    assert "structuredContent" not in result, result
    texts = [block["text"] for block in result["content"] if block["type"] == "text"]
    assert len(texts) == 2, texts
    payload = json.loads(texts[1])
    error = payload["error"]
    assert texts[0] == f"Error: {error['message']}", texts
    assert "schema" not in texts[0].lower(), texts[0]
    assert error["code"] == case.code, error
    assert case.words in error["message"], error
    return payload


def _assert_success(outcome: dict[str, Any], case: Case) -> dict[str, Any]:
    assert "thrown" not in outcome, f"the client threw: {outcome['thrown']}"
    result = outcome["result"]
    assert not result.get("isError"), result["content"][0]["text"]
    data = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) in (data, *data.values())  # list_audio_devices: the array
    return data


@pytest.mark.parametrize("case_name", CASES)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_every_outcome(client, case_name, node_clients, vmic, ollama, model_path, tmp_path):
    case = CASES[case_name]
    ollama.mode = case.ollama if case.ollama != "refused" else "ok"
    host = refused_url() if case.ollama == "refused" else ollama.url
    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"), OLLAMA_HOST=host)
    clip = audio_assets.speech(QUESTION) if case.speech else None
    outcome = call(client, case.tool, case.args(model_path), env, tmp_path, vmic=vmic, clip=clip)
    if "tools" in outcome:
        assert set(outcome["tools"]) == set(ALL_TOOLS)
    if case.code is None:
        data = _assert_success(outcome, case)
        if case.speech:
            assert "france" in (data["transcription"] or "").lower(), data
        if case.tool == "voice_query":
            assert data["response"].startswith("You said:"), data
    else:
        payload = _assert_error(outcome, case)
        if case.code == "empty_response":
            assert "france" in payload["transcription"].lower() and payload["response"] is None, payload
