"""Generated bad input for every tool (hypothesis), through the SDK's in-memory client, plus raw
JSON-RPC lines no SDK client would send, through the real child process.

The property: a call whose arguments break the contract gets an `invalid_argument` error naming
an offending argument; a call whose arguments are valid is never refused as invalid; nothing is
ever written for a rejected call and the server never fails internally. Validity is decided by
an independent model of the contract (`offenders` below), not by the code under test.

Valid calls must not record for real here (a generated duration can be 30 s): the engine's
shutdown event is set, so a valid recording call opens the (virtual) microphone and stops at its
first block with code "cancelled" (or fails earlier: an unknown device, a model name not found).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

import pytest
from fake_ollama import refused_url
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rpc import assert_only_json_rpc, error_of, files_in, server_env, wire
from vmic import env_no_input_devices

EXAMPLES = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

RECORDING = ["duration_ms", "device", "stop_on_silence", "silence_ms"]
FIELDS = {
    "list_audio_devices": ["kind"],
    "get_status": [],
    "stop_speaking": [],
    "capture_audio": RECORDING,
    "transcribe_voice": [*RECORDING, "end_of_turn", "max_pause_ms", "whisper_model", "language"],
    "voice_query": [*RECORDING, "end_of_turn", "max_pause_ms", "whisper_model", "language", "model", "prompt"],
}
LONGEST = {"transcribe_voice": 600_000}
"""duration_ms up to this for the tools named (dictation); 30000 for the others."""
LANGUAGE = re.compile(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,4})?|auto")


def _whisper_codes() -> set[str]:
    """The language codes whisper.cpp itself lists (its own table, not mcp-listen's)."""
    import _pywhispercpp as pw

    return {pw.whisper_lang_str(i) for i in range(pw.whisper_lang_max_id() + 1)}


WHISPER_CODES = _whisper_codes()

LANGUAGE_NAMES = ["english", "Portuguese", "GERMAN", "castilian", "klingon", "portugese"]


# ============================================================================ the contract, modelled


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not a valid JSON string on the wire
        return False
    return True


def _whole(value: Any, low: int, high: float = math.inf) -> bool:
    """JSON has one number type: 5000 and 5000.0 are the same integer; booleans are not numbers."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            return False
        value = int(value)
    return isinstance(value, int) and low <= value <= high


def _text(value: Any, low: int, high: int) -> bool:
    return isinstance(value, str) and low <= len(value) <= high and _utf8(value)


def _blank(value: Any) -> bool:
    """An empty (or all-blank) string means "the default", as in the Node edition."""
    return isinstance(value, str) and not value.strip() and _utf8(value)


def _whisper_knows(name: str) -> bool:
    """whisper.cpp's own lookup, which takes full names ("tatar") as well as codes."""
    import _pywhispercpp as pw

    return _utf8(name) and "\0" not in name and pw.whisper_lang_id(name) >= 0


def _language(value: Any) -> bool:
    """A whisper code (region tags allowed), one of the names the contract lists, or auto."""
    if not isinstance(value, str) or len(value) > 32:
        return False
    if _blank(value):
        return True
    if value.lower() == "castilian" or (len(value) > 3 and _whisper_knows(value.lower())):
        return True
    code = value.lower().replace("_", "-").split("-", 1)[0]
    return LANGUAGE.fullmatch(value) is not None and (code in WHISPER_CODES or value.lower() == "auto")


def _name(v: Any, longest: int) -> bool:
    """A model name: 1..longest characters and no C0/C1 control character (CR, LF, ESC...)."""
    return _text(v, 1, longest) and not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in v)


VALID = {
    "duration_ms": lambda v: _whole(v, 100, 30000),
    "end_of_turn": lambda v: v in ("silence", "smart"),
    "max_pause_ms": lambda v: _whole(v, 100, 30000),
    "kind": lambda v: v in ("input", "output", "all"),
    "silence_ms": lambda v: _whole(v, 100, 10000),
    "device": lambda v: _whole(v, 0) or _text(v, 1, 512),
    "stop_on_silence": lambda v: isinstance(v, bool),
    "whisper_model": lambda v: _blank(v) or _name(v, 1024),
    "language": _language,
    "model": lambda v: _blank(v) or _name(v, 200),
    "prompt": lambda v: _text(v, 0, 100_000),
}


def offenders(tool: str, args: dict[str, Any]) -> set[str]:
    """The arguments that break the contract (empty: the call is valid). null means "default"."""
    fields = FIELDS[tool]
    bad = {k for k in args if k not in fields}
    bad |= {k for k, v in args.items() if k in fields and v is not None and not _valid(tool, k, v)}
    stop = args.get("stop_on_silence")
    stops = stop if stop is not None else tool != "capture_audio"
    for name in ("silence_ms", "end_of_turn", "max_pause_ms"):
        if not bad and args.get(name) is not None and not stops:
            bad.add(name)
    pause = args.get("max_pause_ms")
    if not bad and pause is not None:  # it must be able to hold a pause: smart, and not under silence_ms
        silence = args.get("silence_ms")
        if args.get("end_of_turn") == "silence" or pause < (1000 if silence is None else silence):
            bad.add("max_pause_ms")
    return bad


def _valid(tool: str, name: str, value: Any) -> bool:
    if name == "duration_ms" and tool in LONGEST:
        return _whole(value, 100, LONGEST[tool])
    return VALID[name](value)


def as_sent(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the SDK client puts them on the wire (NaN and Infinity become null)."""
    import mcp_types as types

    request = types.CallToolRequest(params=types.CallToolRequestParams(name="x", arguments=args))
    return request.model_dump(by_alias=True, mode="json", exclude_none=True)["params"]["arguments"]


# ============================================================================== generated arguments


def _nested(depth: int, leaf: Any, as_dict: bool) -> Any:
    return functools.reduce(lambda inner, _: {"k": inner} if as_dict else [inner], range(depth), leaf)


SPECIAL_NUMBERS = st.sampled_from(
    [
        -0.0,
        0.0,
        0,
        -1,
        99,
        100,
        100.0,
        100.5,
        30000,
        30001,
        10000,
        10001,
        5000.0,
        1e308,
        -1e308,
        5e-324,
        float("nan"),
        float("inf"),
        float("-inf"),
        2**31,
        2**63,
        -(2**63) - 1,
        10**30,
        True,
        False,
    ]
)
LONG_TEXT = st.builds(
    lambda ch, n: ch * n, st.sampled_from(["a", "é", "字", "😀", "\x00", " "]), st.integers(0, 70_000)
)
UNICODE = st.text(alphabet=st.characters(codec=None), max_size=40) | st.sampled_from(
    ["", " ", "\u202e", "\ufeff", "\ud800", "a\udfffb", "../../etc/passwd", "~", "con", "\n", "NaN"]
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | SPECIAL_NUMBERS | UNICODE | LONG_TEXT
ANYTHING = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
) | st.builds(_nested, st.integers(1, 120), SCALARS, st.booleans())

NEAR_VALID = {
    "duration_ms": st.integers(-10, 40_000) | st.floats(-1, 40_000) | st.integers(599_990, 600_010),
    "end_of_turn": st.sampled_from(["silence", "smart", "", "Smart", "clever"]) | st.text(max_size=8),
    "kind": st.sampled_from(["input", "output", "all", "both", "", "INPUT"]) | st.text(max_size=8),
    "silence_ms": st.integers(-10, 12_000),
    "max_pause_ms": st.integers(-10, 31_000) | st.sampled_from([99, 100, 999, 1000, 30000, 30001, 3000.0]),
    "device": st.integers(-3, 10**20) | st.text(max_size=600),
    "stop_on_silence": st.booleans(),
    "whisper_model": st.text(max_size=1100),
    "language": st.from_regex(LANGUAGE, fullmatch=True)
    | st.sampled_from(sorted(WHISPER_CODES))
    | st.sampled_from(LANGUAGE_NAMES)
    | st.text(max_size=12),
    "model": st.text(max_size=210),
    "prompt": st.text(max_size=30) | st.integers(99_995, 100_005).map(lambda n: "p" * n),
}


@st.composite
def arguments(draw: Any, tool: str) -> dict[str, Any]:
    """Known arguments with near-valid or arbitrary values, sometimes absent, sometimes unknown keys."""
    args: dict[str, Any] = {}
    for name in FIELDS[tool]:
        choice = draw(st.sampled_from(["absent"] * 3 + ["near"] * 4 + ["anything"]))
        if choice != "absent":
            args[name] = draw(NEAR_VALID[name] if choice == "near" else ANYTHING)
    if draw(st.integers(0, 3)) == 0:
        for key in draw(
            st.lists(UNICODE | st.sampled_from(["Duration_ms", "durationMs", "_meta", "arguments"]), max_size=3)
        ):
            args.setdefault(key, draw(ANYTHING))
    return args


# ============================================================================ the in-memory server


class InMemory:
    """One Engine + build_server + mcp.Client(server) for the whole module, driven from sync tests."""

    def __init__(self, portal: Any, client: Any, recordings: Path) -> None:
        self.portal, self.client, self.recordings = portal, client, recordings

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        return self.portal.call(self.client.call_tool, tool, args)


@pytest.fixture(scope="module")
def server(vmic, tmp_path_factory, model_path) -> Any:
    from anyio.from_thread import start_blocking_portal
    from mcp import Client

    from mcp_listen.config import Settings
    from mcp_listen.engine.engine import Engine
    from mcp_listen.server.app import build_server

    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "models").mkdir()
    (folder / "models" / "ggml-base.en.bin").symlink_to(model_path)  # the default model resolves
    engine = Engine(
        Settings(
            recordings_dir=folder / "recordings",
            models_dir=folder / "models",
            ollama_host=refused_url(),
            ollama_timeout_s=1,
        )
    )
    engine.shutdown.set()
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(build_server(engine))) as client:
            yield InMemory(portal, client, folder / "recordings")
            status = portal.call(client.call_tool, "get_status", {})
            assert not status.is_error and status.structured_content["recording"] is False


def check(server: InMemory, tool: str, args: dict[str, Any]) -> None:
    result = server.call(tool, args)
    data = error_of(result) if result.is_error else result.structured_content
    code = (data.get("error") or {}).get("code")
    bad = offenders(tool, as_sent(args))
    assert code != "internal_error", (tool, args, data)
    if bad:
        assert result.is_error and code == "invalid_argument", (tool, args, bad, data)
        message = data["error"]["message"]
        assert any(name in message for name in bad), (tool, args, bad, message)
        assert files_in(server.recordings) == [], "a rejected call wrote a file"
    else:
        assert code != "invalid_argument", (tool, args, data)
        if tool in ("capture_audio", "transcribe_voice", "voice_query"):
            assert result.is_error  # shutdown is set: nothing valid may record here
        else:
            assert not result.is_error, (tool, args, data)
    assert files_in(server.recordings) == []


@pytest.mark.parametrize("tool", sorted(FIELDS))
def test_generated_arguments(server, tool):
    @EXAMPLES
    @given(args=arguments(tool))
    def run(args: dict[str, Any]) -> None:
        check(server, tool, args)

    run()


def test_the_model_of_the_contract_is_not_trivial():
    """The oracle must tell valid from invalid, or the property above proves nothing."""
    assert offenders("capture_audio", {"duration_ms": 5000.0, "device": 0, "stop_on_silence": None}) == set()
    assert offenders("capture_audio", {"duration_ms": -0.0}) == {"duration_ms"}
    assert offenders("capture_audio", {"silence_ms": 500}) == {"silence_ms"}
    assert offenders("voice_query", {"silence_ms": 500, "language": "en-US"}) == set()
    assert offenders("voice_query", {"language": "en\n"}) == {"language"}
    assert offenders("voice_query", {"language": "xx", "whisper_model": ""}) == {"language"}
    assert offenders("voice_query", {"language": "Portuguese", "model": " ", "prompt": "p" * 32000}) == set()
    assert offenders("voice_query", {"language": "TATAR"}) == set()
    assert offenders("get_status", {"x": None}) == {"x"}
    assert offenders("stop_speaking", {"text": "quiet"}) == {"text"}
    assert offenders("transcribe_voice", {"duration_ms": 600_000}) == set()
    assert offenders("voice_query", {"duration_ms": 30_001}) == {"duration_ms"}
    assert offenders("voice_query", {"end_of_turn": "smart", "stop_on_silence": False}) == {"end_of_turn"}
    assert offenders("transcribe_voice", {"max_pause_ms": 2500.0, "end_of_turn": "smart"}) == set()
    assert offenders("transcribe_voice", {"max_pause_ms": 999}) == {"max_pause_ms"}  # under the default silence
    assert offenders("voice_query", {"max_pause_ms": 1500, "silence_ms": 2000}) == {"max_pause_ms"}
    assert offenders("voice_query", {"max_pause_ms": 5000, "end_of_turn": "silence"}) == {"max_pause_ms"}
    assert offenders("capture_audio", {"max_pause_ms": 5000}) == {"max_pause_ms"}
    assert offenders("list_audio_devices", {"kind": "both"}) == {"kind"}
    assert as_sent({"duration_ms": float("nan")}) == {"duration_ms": None}


# ====================================================================== raw lines, real child process

RAW = {
    "NaN": (b'{"duration_ms": NaN}', "duration_ms"),
    "-Infinity": (b'{"duration_ms": -Infinity}', "duration_ms"),
    "1e400": (b'{"silence_ms": 1e400, "stop_on_silence": true}', "silence_ms"),
    "negative zero": (b'{"duration_ms": -0.0}', "duration_ms"),
    "huge integer": (b'{"duration_ms": ' + b"9" * 500 + b"}", "duration_ms"),
    "nested 150": (b'{"device": ' + b"[" * 150 + b"]" * 150 + b"}", "device"),
    "unknown key": (b'{"duration_ms": 500, "\xe2\x80\xae": 1}', "\u202e"),
    "bool as number": (b'{"duration_ms": true}', "duration_ms"),
}
UNPARSEABLE = [
    b"not json at all",
    b"",
    b"{}",
    b"[]",
    b"null",
    b'{"jsonrpc": "2.0", "id": 900, "method": "tools/call", "params": {"name": "capture_audio", "arguments": '
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}}",
    b'{"jsonrpc": "2.0", "id": 901, "method": "tools/call", "params": {"name": "capture_audio", "arguments": {"device": "\\ud800"}}}',
    b'{"jsonrpc": "2.0", "id": 902, "method": "tools/call", "params": {"name": "capture_audio", "arguments": [1, 2]}}',
    b'{"jsonrpc": "2.0", "id": 903, "method": "tools/call", "params": {"name": "capture_audio", "arguments": "x"}}',
    b'{"jsonrpc": "2.0", "id": 904, "method": "tools/call", "params": {"name": 5}}',
    b'{"jsonrpc": "2.0", "id": 905, "method": "tools/call", "params": {"name": "capture_audio", "arguments": {"device": "\xff\xfe"}}}',
    b'[{"jsonrpc": "2.0", "id": 906, "method": "tools/list"}]',
    b'{"jsonrpc": "2.0", "id": 907, "method": "no/such/method"}',
]


def test_raw_lines_no_sdk_client_would_send(tmp_path):
    """JSON extensions (NaN, Infinity), numbers beyond float range, deep nesting, broken frames: each
    is an invalid_argument naming the argument, a JSON-RPC error, or (for a frame the SDK cannot
    parse at all) no reply; the server keeps serving and stdout stays JSON-RPC."""
    rec_dir = tmp_path / "recordings"
    env = server_env(env_no_input_devices(), MCP_LISTEN_RECORDINGS_DIR=str(rec_dir))
    with wire(env) as w:
        ids = {}
        for n, (name, (raw_args, _)) in enumerate(RAW.items()):
            ids[name] = 800 + n
            w.server.proc.stdin.write(
                b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "capture_audio", '
                b'"arguments": %s}}\n' % (ids[name], raw_args)
            )
        w.server.proc.stdin.write(b"\n".join(UNPARSEABLE) + b"\n")
        w.server.proc.stdin.flush()
        for name, (_, culprit) in RAW.items():
            result = w.wait(ids[name], 30)["result"]
            error = error_of(result)["error"]
            assert result["isError"] and error["code"] == "invalid_argument", (name, error)
            assert culprit in error["message"], (name, error)
        for request_id in (902, 903, 904, 907):
            assert "error" in w.wait(request_id, 30), request_id
        device = error_of(w.wait(905, 30)["result"])["error"]["code"]
        assert device in ("no_input_device", "device_not_found")
        status = w.status()
        assert status["recording"] is False
        w.server.close_stdin()
        assert w.server.wait_exit(10) == 0
        assert_only_json_rpc(w.server.lines)
    assert files_in(rec_dir) == []
