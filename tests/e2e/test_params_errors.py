"""Invalid params through the real server, in both protocol eras: the error names what is wrong.

The 2025 era opens with `initialize`; the 2026-07-28 era has no handshake (every request carries
its own `_meta` envelope), so an error there must never tell the client to send `initialize`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rpc import RawServer, server_env

MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
"""The per-request envelope of the 2026-07-28 era: a first request carrying it opens that era."""
ERAS = ("2025-11-25", "2026-07-28")


def _opened(server: RawServer, era: str) -> None:
    """Open the connection in `era`: the handshake, or a first enveloped request."""
    if era == "2026-07-28":
        reply = _call(server, era, "tools/call", {"name": "get_status", "arguments": {}})
        assert "result" in reply, f"the enveloped get_status must open the 2026-07-28 era: {reply}"
    else:
        server.initialize(era)


def _call(server: RawServer, era: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request in `era` (the envelope merged into any `_meta` given), its reply."""
    if era == "2026-07-28":
        params = {**params, "_meta": {**MODERN, **params.get("_meta", {})}}
    return server.call(method, params, timeout=30)


def _error(reply: dict[str, Any]) -> str:
    assert "error" in reply, f"an invalid request must get an error: {reply}"
    assert reply["error"]["code"] == -32602, reply
    message = reply["error"]["message"]
    assert "initialize" not in message, f"an initialized or handshake-free connection was told to initialize: {reply}"
    assert message != "Invalid request parameters", f"the bare SDK message says nothing of what is wrong: {reply}"
    return message


@pytest.mark.parametrize("era", ERAS)
def test_invalid_params_name_the_field_and_the_value(era):
    with RawServer(server_env()) as server:
        _opened(server, era)
        arguments = _call(server, era, "tools/call", {"name": "get_status", "arguments": "x"})
        topic = _call(server, era, "prompts/get", {"name": "talk", "arguments": {"topic": 5}})
        unknown = _call(server, era, "prompts/get", {"name": "nope"})
        still = _call(server, era, "tools/call", {"name": "get_status", "arguments": {}})
    message = _error(arguments)
    assert "arguments" in message and "object" in message and '"x"' in message, message
    message = _error(topic)
    assert "arguments.topic" in message and "string" in message and "5" in message, message
    message = _error(unknown)
    assert "nope" in message and "talk" in message, message
    assert "result" in still, f"the server must serve on after invalid params: {still}"


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("token", [None, {}, [1], True])
def test_a_progress_token_that_is_not_a_string_or_a_number_is_named(era, token):
    with RawServer(server_env()) as server:
        _opened(server, era)
        reply = _call(
            server, era, "tools/call", {"name": "get_status", "arguments": {}, "_meta": {"progressToken": token}}
        )
    message = _error(reply)
    assert "_meta.progressToken" in message and "string or a number" in message, message
    assert f"got {json.dumps(token)}" in message, message


@pytest.mark.parametrize("era", ERAS)
def test_a_fractional_progress_token_is_legal_and_the_call_goes_ahead_without_progress(env_mic, era):
    """MCP's ProgressToken is `string | number`: 1.5 is a legal token. The SDK's own type takes
    integers only, so the call goes ahead without progress (a receiver need not send any); an
    integer token in the same run shows that this capture does report progress."""
    with RawServer(env_mic) as server:
        _opened(server, era)
        whole = _call(server, era, "tools/call", _capture(token=7))
        fractional = _call(server, era, "tools/call", _capture(token=1.5))
        notes = [json.loads(line) for line in server.lines]
    for reply in (whole, fractional):
        assert "result" in reply and not reply["result"]["isError"], reply
    tokens = [n["params"]["progressToken"] for n in notes if n.get("method") == "notifications/progress"]
    assert 7 in tokens, f"the integer token's capture must report progress, or this test shows nothing: {tokens}"
    assert set(tokens) == {7}, f"only the integer token gets progress: {tokens}"


def _capture(token: float) -> dict[str, Any]:
    return {"name": "capture_audio", "arguments": {"duration_ms": 300}, "_meta": {"progressToken": token}}


@pytest.fixture
def env_mic(vmic, tmp_path):
    return server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "recordings"))


def test_before_initialize_the_legacy_era_still_says_to_initialize():
    """The init gate's wording stays for the 2025 era: there, initialize is what is missing."""
    with RawServer(server_env()) as server:
        reply = server.call("tools/call", {"name": "get_status", "arguments": "x"})
    assert reply["error"]["message"].startswith("Not initialized: send initialize"), reply
