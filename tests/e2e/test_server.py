"""The real server as a child process over stdio, with the virtual microphone as its input."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import anyio
import audio_assets
import numpy as np
import pytest
from rpc import ALL_TOOLS, LEGACY_VERSIONS, RawServer, error_of, mcp_client, server_env, structured, tool_call
from speech_checks import wait_until_recording
from vmic import env_no_input_devices, env_without_portaudio

from mcp_listen.contract.limits import MAX_PROMPT_CHARS

pytestmark = pytest.mark.anyio

TOOL_NAMES = set(ALL_TOOLS)
"""Piper is in the test extra: speak_text and converse are listed (tests/unit/test_speak_unit.py: only where piper is)."""


@pytest.fixture
def rec_dir(tmp_path: Path) -> Path:
    return tmp_path / "recordings"


@pytest.fixture
def env(vmic, rec_dir):
    return server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir))


async def test_initialize_and_tools_list(env):
    async with mcp_client(env) as client:
        info = client.initialize_result.server_info if hasattr(client, "initialize_result") else None
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOL_NAMES
    for tool in tools.values():
        assert tool.input_schema["additionalProperties"] is False
        assert tool.output_schema and tool.output_schema["type"] == "object"
        assert tool.description and len(tool.description) > 80
    devices = tools["list_audio_devices"].annotations
    assert (devices.read_only_hint, devices.idempotent_hint, devices.open_world_hint) == (True, True, False)
    for name in ("capture_audio", "voice_query", "transcribe_voice"):
        notes = tools[name].annotations
        assert (notes.read_only_hint, notes.idempotent_hint, notes.open_world_hint) == (False, False, True)
    capture = tools["capture_audio"].input_schema["properties"]
    assert set(capture) == {"duration_ms", "device", "stop_on_silence", "silence_ms"}
    del info


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_every_handshake_protocol_version(env, version):
    with RawServer(env) as server:
        reply = server.initialize(version)
        listed = server.call("tools/list", {})
        prompts = server.call("prompts/list", {})
    assert reply["result"]["protocolVersion"] == version
    assert reply["result"]["serverInfo"]["name"] == "mcp-listen"
    assert reply["result"]["serverInfo"]["version"]
    assert {"tools", "prompts"} <= set(reply["result"]["capabilities"])
    assert set(reply["result"]["capabilities"]) <= {"tools", "prompts", "experimental"}
    assert {t["name"] for t in listed["result"]["tools"]} == TOOL_NAMES
    assert {p["name"] for p in prompts["result"]["prompts"]} == {"talk", "dictate"}


async def test_modern_handshake(env):
    async with mcp_client(env, mode="auto") as client:
        result = await client.call_tool("get_status", {})
    assert result.structured_content["recording"] is False


async def test_list_audio_devices_lists_the_virtual_microphone(env):
    async with mcp_client(env) as client:
        result = await client.call_tool("list_audio_devices", {})
    assert not result.is_error
    devices = structured(result)["devices"]
    assert json.loads(result.content[0].text) == devices
    assert devices, "the virtual microphone must be listed"
    for device in devices:
        assert set(device) == {"index", "name", "id", "maxInputChannels", "defaultSampleRate", "isDefault"}
        assert device["maxInputChannels"] > 0 and device["id"]
    assert sum(d["isDefault"] for d in devices) == 1
    assert len({d["id"] for d in devices}) == len(devices)


async def test_device_ids_are_stable_across_restarts(env):
    async with mcp_client(env) as client:
        first = structured(await client.call_tool("list_audio_devices", {}))["devices"]
    async with mcp_client(env) as client:
        second = structured(await client.call_tool("list_audio_devices", {}))["devices"]
    assert [d["id"] for d in first] == [d["id"] for d in second]


async def test_fixed_capture_has_exact_length_and_private_file(env, rec_dir):
    async with mcp_client(env) as client:
        result = await client.call_tool("capture_audio", {"duration_ms": 500})
    assert not result.is_error, result.content[0].text
    data = structured(result)
    assert json.loads(result.content[0].text) == data
    assert set(data) == {"path", "duration_ms", "sample_rate", "channels", "size_bytes"}
    path = Path(data["path"])
    assert path.parent == rec_dir and path.name.startswith("mcp-listen-") and path.suffix == ".wav"
    assert (data["duration_ms"], data["sample_rate"], data["channels"]) == (500, 16000, 1)
    assert data["size_bytes"] == path.stat().st_size == 16044
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(audio_assets.read_wav(path)) == 8000


async def test_capture_records_what_was_played(env, vmic):
    clip = audio_assets.concat([audio_assets.tone(1000, 300, 0.4), audio_assets.speech("testing one two three")])
    played = audio_assets.read_wav(clip)
    async with mcp_client(env) as client:
        async with anyio.create_task_group() as tg:
            results = []

            async def capture():
                results.append(await client.call_tool("capture_audio", {"duration_ms": 4000}))

            tg.start_soon(capture)
            await wait_until_recording(client)
            await anyio.to_thread.run_sync(lambda: vmic.play(clip))
    data = structured(results[0])
    recorded = audio_assets.read_wav(data["path"])
    assert len(recorded) == 64000
    lag, peak = audio_assets.xcorr_align(recorded, played)
    assert peak > 0.99, f"recorded audio does not match what was played (peak {peak:.3f})"
    assert 0 <= lag and lag + len(played) <= len(recorded)
    assert np.array_equal(recorded[lag : lag + len(played)], played) or peak > 0.999


async def test_capture_by_id_and_index(env):
    async with mcp_client(env) as client:
        devices = structured(await client.call_tool("list_audio_devices", {}))["devices"]
        default = next(d for d in devices if d["isDefault"])
        by_id = await client.call_tool("capture_audio", {"duration_ms": 200, "device": default["id"]})
        by_index = await client.call_tool("capture_audio", {"duration_ms": 200, "device": default["index"]})
        unknown = await client.call_tool("capture_audio", {"duration_ms": 200, "device": "ALSA:no such mic"})
        out_of_range = await client.call_tool("capture_audio", {"duration_ms": 200, "device": 999})
    assert not by_id.is_error and not by_index.is_error
    for bad in (unknown, out_of_range):
        assert bad.is_error
        error = error_of(bad)["error"]
        assert error["code"] == "device_not_found" and "list_audio_devices" in error["message"]


INVALID_CALLS = [
    ("capture_audio", {"duration_ms": 99}, "duration_ms"),
    ("capture_audio", {"duration_ms": 30001}, "duration_ms"),
    ("capture_audio", {"duration_ms": "5000"}, "duration_ms"),
    ("capture_audio", {"duration_ms": 2500.5}, "duration_ms"),
    ("capture_audio", {"duration_ms": True}, "duration_ms"),
    ("capture_audio", {"device": ""}, "device"),
    ("capture_audio", {"device": -1}, "device"),
    ("capture_audio", {"stop_on_silence": "yes"}, "stop_on_silence"),
    ("capture_audio", {"silence_ms": 500}, "silence_ms"),
    ("capture_audio", {"stop_on_silence": True, "silence_ms": 99}, "silence_ms"),
    ("capture_audio", {"stop_on_silence": True, "silence_ms": 10001}, "silence_ms"),
    ("capture_audio", {"bogus": 1}, "bogus"),
    ("list_audio_devices", {"all": True}, "all"),
    ("get_status", {"verbose": True}, "verbose"),
    ("voice_query", {"silence_ms": 500, "stop_on_silence": False}, "silence_ms"),
    ("voice_query", {"model": "x" * 201}, "model"),
    ("voice_query", {"prompt": "p" * (MAX_PROMPT_CHARS + 1)}, "prompt"),
    ("transcribe_voice", {"model": "llama3.2"}, "model"),
]


async def test_every_validation_error_names_the_argument_and_writes_nothing(env, rec_dir):
    async with mcp_client(env) as client:
        for name, args, culprit in INVALID_CALLS:
            result = await client.call_tool(name, args)
            assert result.is_error, (name, args)
            error = error_of(result)["error"]
            assert error["code"] == "invalid_argument", (name, args, error)
            assert culprit in error["message"], (name, args, error)
        status = structured(await client.call_tool("get_status", {}))
    assert status["recording"] is False
    assert not rec_dir.exists() or not any(rec_dir.iterdir())


def test_second_recording_in_the_same_write_is_refused_at_once(env):
    with RawServer(env) as server:
        server.initialize()
        first = tool_call(server, "capture_audio", {"duration_ms": 1500})
        second = tool_call(server, "capture_audio", {"duration_ms": 1500})
        started = time.monotonic()
        server.send(first, second)
        refused = server.wait_for(second["id"])
        refused_after = time.monotonic() - started
        done = server.wait_for(first["id"])
    assert refused["result"]["isError"] is True
    assert error_of(refused["result"])["error"]["code"] == "busy"
    assert "already in progress" in refused["result"]["content"][0]["text"]
    assert refused_after < 1.4, "the refusal must not wait for the first recording"
    assert "isError" not in done["result"] or not done["result"]["isError"]


def test_stdout_carries_only_json_rpc(env, tmp_path):
    with RawServer(env, stderr_path=tmp_path / "stderr.log") as server:
        server.initialize()
        server.call("tools/list", {})
        for name, args in [
            ("list_audio_devices", {}),
            ("capture_audio", {"duration_ms": 300}),
            ("capture_audio", {"duration_ms": 1}),
            ("capture_audio", {"stop_on_silence": True, "duration_ms": 600}),
            ("get_status", {}),
            ("transcribe_voice", {"whisper_model": "/nonexistent/ggml-x.bin"}),
            ("nonexistent_tool", {}),
        ]:
            server.call("tools/call", {"name": name, "arguments": args})
        server.close_stdin()
        assert server.wait_exit(10) == 0
        lines = list(server.lines)
    assert len(lines) == 9  # initialize, tools/list and seven calls: nothing else
    for line in lines:
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"


async def test_missing_portaudio_still_serves_and_says_how_to_install(rec_dir):
    env = server_env(env_without_portaudio(), MCP_LISTEN_RECORDINGS_DIR=str(rec_dir))
    async with mcp_client(env) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("list_audio_devices", {})
        capture = await client.call_tool("capture_audio", {"duration_ms": 200})
    assert {t.name for t in tools} == TOOL_NAMES
    for failed in (result, capture):
        assert failed.is_error
        error = error_of(failed)["error"]
        assert error["code"] == "portaudio_missing"
        assert "sudo apt install libportaudio2" in error["message"]


async def test_no_input_devices_is_an_empty_list(rec_dir):
    env = server_env(env_no_input_devices(), MCP_LISTEN_RECORDINGS_DIR=str(rec_dir))
    async with mcp_client(env) as client:
        listed = await client.call_tool("list_audio_devices", {})
        capture = await client.call_tool("capture_audio", {"duration_ms": 200})
    assert not listed.is_error and structured(listed) == {"devices": []}
    assert json.loads(listed.content[0].text) == []
    assert capture.is_error and error_of(capture)["error"]["code"] == "no_input_device"
    assert not rec_dir.exists() or not any(rec_dir.iterdir())


def test_requests_before_initialize_get_an_error_that_says_what_to_do(env):
    with RawServer(env) as server:
        early = [server.request("tools/list"), tool_call(server, "get_status", {})]
        server.send(*early)
        replies = [server.wait_for(msg["id"], 30) for msg in early]
        server.initialize()
        listed = server.call("tools/list", {})
    for msg, reply in zip(early, replies):
        assert "result" not in reply, reply
        assert reply["error"]["code"] == -32602
        assert reply["error"]["message"].startswith("Not initialized: send initialize"), reply
        assert msg["method"] in reply["error"]["message"]
    assert {t["name"] for t in listed["result"]["tools"]} == TOOL_NAMES


PIPELINED_RUNS = 12


def _pipelined_run(env) -> list:
    """initialize, initialized, tools/list and a get_status call in one write, then EOF; the ids answered."""
    import subprocess

    from rpc import SERVER_CMD

    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_status", "arguments": {}}},
    ]
    wire = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    done = subprocess.run(SERVER_CMD, input=wire, capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert all("result" in reply for reply in replies), replies
    return [reply["id"] for reply in replies]


def test_every_pipelined_request_is_answered_before_exit_at_eof(env):
    """mcp 2.3 cancels handlers in flight when stdin ends: without server.Ledger the get_status
    call went unanswered in every run here."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: _pipelined_run(env), range(PIPELINED_RUNS)))
    unanswered = [ids for ids in runs if sorted(ids) != [1, 2, 3]]
    assert not unanswered, f"{len(unanswered)} of {PIPELINED_RUNS} runs left requests unanswered: {unanswered[:5]}"


async def test_list_audio_devices_by_kind_through_the_real_server(env):
    """vmic's ALSA pcms (type pulse) are duplex: PortAudio lists `vmic` and `default` as both an
    input and an output, `default` being the default of each."""
    async with mcp_client(env) as client:
        plain = structured(await client.call_tool("list_audio_devices", {}))["devices"]
        inputs = structured(await client.call_tool("list_audio_devices", {"kind": "input"}))["devices"]
        outputs = structured(await client.call_tool("list_audio_devices", {"kind": "output"}))["devices"]
        every = structured(await client.call_tool("list_audio_devices", {"kind": "all"}))["devices"]
        wrong = await client.call_tool("list_audio_devices", {"kind": "speakers"})
    assert inputs == plain, "kind input is today's result, field for field"
    assert outputs, "the virtual sound server's sinks must be listed as outputs"
    for device in outputs:
        assert set(device) == {"index", "name", "id", "maxInputChannels", "defaultSampleRate", "isDefault", "kind",
                               "maxOutputChannels", "isDefaultOutput"}  # fmt: skip
        assert device["maxOutputChannels"] > 0 and device["kind"] in ("output", "both")
    assert sum(d["isDefaultOutput"] for d in outputs) == 1
    assert {d["id"] for d in every} == {d["id"] for d in plain} | {d["id"] for d in outputs}
    both = {d["id"] for d in every if d["kind"] == "both"}
    assert both == {d["id"] for d in plain} & {d["id"] for d in outputs}
    assert [d["isDefault"] for d in every if d["id"] in both] == [d["isDefault"] for d in plain if d["id"] in both]
    assert wrong.is_error and error_of(wrong)["error"]["code"] == "invalid_argument"


def test_a_client_that_closes_our_stdout_ends_the_server_quietly(env, rec_dir, tmp_path):
    """The client closes the read end of our stdout and keeps stdin open: no answer can reach it
    any more, so the server stops its recording and exits 141 (128 + SIGPIPE, as a program killed
    by the broken pipe), without waiting for stdin and without a traceback. Before, it lived on
    until stdin closed, then exited 1 with a BrokenPipeError traceback on stderr."""
    import os
    import subprocess
    import time

    from rpc import SERVER_CMD

    read_end, write_end = os.pipe()
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(SERVER_CMD, stdin=subprocess.PIPE, stdout=write_end, stderr=stderr, env=env)
    os.close(write_end)
    os.close(read_end)  # nobody reads the server's stdout now
    assert proc.stdin is not None
    try:
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        capture = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "capture_audio", "arguments": {"duration_ms": 20000}}}  # fmt: skip
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in (initialize, initialized, capture)))
        proc.stdin.flush()
        try:
            code = proc.wait(timeout=10)
            waited_for_stdin = False
        except subprocess.TimeoutExpired:
            waited_for_stdin = True
            proc.stdin.close()
            code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        time.sleep(0)
    log = stderr_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert code == 141, f"exit {code}, not 141 (stdout closed by the client); stderr: {log[-2000:]}"
    assert not waited_for_stdin, "the server waited for stdin to close though nothing could be answered any more"
    assert "stdout" in log, f"stderr must say why the server ended: {log[-2000:]}"
    assert not rec_dir.exists() or not any(rec_dir.iterdir()), "the recording in flight left a file"
