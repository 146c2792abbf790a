"""llm.ask and llm.probe against a real HTTP server speaking Ollama's API (tests/fake_ollama.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dns_sink
import pytest
from fake_ollama import FakeOllama, refused_url
from rpc import until

from mcp_listen.config.urls import normalize_ollama_host
from mcp_listen.errors import Cancelled, LLMError
from mcp_listen.ollama import client as llm


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        yield server


def _ask(host: str, text: str = "what time is it", **kw) -> str:
    args = dict(text=text, model="llama3.2", system_prompt="Answer briefly.", host=host, timeout_s=10.0)
    args.update(kw)
    return llm.ask(**args)


def _cancelled(host: str, **kw) -> Cancelled:
    """A cancel is not an Ollama failure: it ends the call as cancelled (exit 130), not in stage llm."""
    with pytest.raises(Cancelled) as err:
        _ask(host, **kw)
    assert not isinstance(err.value, LLMError)
    return err.value


def _code(host: str, **kw) -> LLMError:
    with pytest.raises(LLMError) as err:
        _ask(host, **kw)
    assert err.value.stage == "llm"
    return err.value


def test_ok_reply_and_request_body(fake: FakeOllama) -> None:
    assert _ask(fake.url, "hello there") == "You said: hello there"
    body = fake.requests[-1]
    assert body["model"] == "llama3.2"
    assert body["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "hello there"},
    ]
    assert body["stream"] is True
    assert fake.paths[-1] == ("POST", "/api/chat")


def test_reply_is_stripped(fake: FakeOllama) -> None:
    fake.reply = "  \n It is noon.  \n"
    assert _ask(fake.url) == "It is noon."


def test_refused_is_unreachable() -> None:
    url = refused_url()
    err = _code(url)
    assert err.code == "ollama_unreachable"
    assert url in err.message and "ollama serve" in err.message


def test_404_is_model_not_pulled(fake: FakeOllama) -> None:
    fake.mode = "404"
    err = _code(fake.url, model="qwen3:0.6b")
    assert err.code == "model_not_pulled"
    assert err.message == 'Model "qwen3:0.6b" not found. Pull it with: ollama pull qwen3:0.6b'


def test_500_is_http_error_with_ollamas_text(fake: FakeOllama) -> None:
    fake.mode = "500"
    err = _code(fake.url)
    assert err.code == "http_error"
    assert "500" in err.message and "fake internal server error" in err.message


@pytest.mark.parametrize("mode", ["garbage", "cut"])
def test_broken_streams_are_bad_response(fake: FakeOllama, mode: str) -> None:
    fake.mode = mode
    assert _code(fake.url).code == "bad_response"


def test_empty_reply(fake: FakeOllama) -> None:
    fake.mode = "empty"
    assert _code(fake.url).code == "empty_response"
    fake.mode = "ok"
    fake.reply = "   "
    assert _code(fake.url).code == "empty_response"


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_total_deadline_holds(fake: FakeOllama, mode: str) -> None:
    fake.mode = mode
    start = time.monotonic()
    err = _code(fake.url, timeout_s=1.0)
    took = time.monotonic() - start
    assert err.code == "timeout"
    assert "1 s" in err.message and "MCP_LISTEN_OLLAMA_TIMEOUT_S" in err.message
    assert 0.9 <= took < 2.5


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_cancel_stops_quickly(fake: FakeOllama, mode: str) -> None:
    fake.mode = mode
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    err = _cancelled(fake.url, timeout_s=30.0, cancel=cancel)
    took = time.monotonic() - start
    assert err.code == "cancelled"
    assert took < 1.5  # set at 0.5 s: stops within 1 s of it


def test_already_cancelled_sends_nothing_useful(fake: FakeOllama) -> None:
    cancel = threading.Event()
    cancel.set()
    assert _cancelled(fake.url, cancel=cancel).code == "cancelled"


@pytest.mark.parametrize("form", ["127.0.0.1:{port}", ":{port}", "http://127.0.0.1:{port}", "http://127.0.0.1:{port}/"])
def test_host_forms(fake: FakeOllama, form: str) -> None:
    host = normalize_ollama_host(form.format(port=fake.port))
    assert _ask(host, "hi") == "You said: hi"
    assert _ask(form.format(port=fake.port), "raw") == "You said: raw"


def test_environment_never_redirects_the_request(fake: FakeOllama, monkeypatch) -> None:
    """OLLAMA_HOST and proxy variables must not override the host we were given."""
    dead = refused_url()
    monkeypatch.setenv("OLLAMA_HOST", dead)
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert _ask(fake.url, "direct") == "You said: direct"
    assert llm.probe(fake.url, "llama3.2")["reachable"] is True


def test_mode_can_change_between_calls(fake: FakeOllama) -> None:
    fake.mode = "404"
    assert _code(fake.url).code == "model_not_pulled"
    fake.mode = "ok"
    assert _ask(fake.url, "again") == "You said: again"


def test_probe_ok(fake: FakeOllama) -> None:
    assert llm.probe(fake.url, "llama3.2") == {
        "reachable": True,
        "version": "0.12.0",
        "model_available": True,
        "error": None,
    }
    assert llm.probe(fake.url, "llama3.2:latest")["model_available"] is True
    assert llm.probe(fake.url, "qwen3:0.6b")["model_available"] is False
    assert llm.probe(fake.url, None)["model_available"] is None


def test_probe_refused_and_broken(fake: FakeOllama) -> None:
    url = refused_url()
    down = llm.probe(url, "llama3.2")
    assert down["reachable"] is False and "ollama serve" in down["error"]
    fake.mode = "500"
    broken = llm.probe(fake.url, "llama3.2")
    assert broken["reachable"] is False and "500" in broken["error"]


def test_probe_times_out(fake: FakeOllama) -> None:
    fake.mode = "hang"
    start = time.monotonic()
    result = llm.probe(fake.url, "llama3.2", timeout_s=0.5)
    assert result["reachable"] is False and "did not answer" in result["error"]
    assert time.monotonic() - start < 3


def test_fake_stops_fast_with_hanging_handlers() -> None:
    fake = FakeOllama(mode="hang").start()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    _cancelled(fake.url, cancel=cancel)
    start = time.monotonic()
    fake.stop()
    assert time.monotonic() - start < 1.0


def test_non_streaming_endpoint_of_fake_matches_ollama_client(fake: FakeOllama) -> None:
    """The fake's non-streaming /api/chat parses with the real ollama client."""
    from ollama import Client

    with Client(host=fake.url, timeout=5, trust_env=False) as client:
        response = client.chat(model="m", messages=[{"role": "user", "content": "x"}], stream=False)
        assert response.message.content == "You said: x" and response.done
        assert client.show("llama3.2").details.family == "llama"


# ================================================================ redirects, credentials, quoting


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_an_error_and_nothing_reaches_its_target(fake: FakeOllama, status: int) -> None:
    with FakeOllama() as target:
        fake.mode = "redirect"
        fake.redirect_status = status
        fake.redirect_to = target.url.replace("http://", "http://mallory:hunter2@")
        err = _code(fake.url, text="my secret words", system_prompt="my secret prompt")
        probed = llm.probe(fake.url, "llama3.2")
        assert err.code == "ollama_redirect"
        assert str(status) in err.message and "OLLAMA_HOST" in err.message
        assert "hunter2" not in err.message and "mallory" not in err.message
        assert probed["reachable"] is False and "redirect" in probed["error"]
        assert "hunter2" not in probed["error"]
        assert target.paths == [] and target.requests == [], "the redirect target received a request"
    assert fake.paths[0] == ("POST", "/api/chat")


@pytest.mark.parametrize("mode", ["refused", "404", "500", "redirect", "garbage", "hang"])
def test_credentials_in_the_host_never_appear_in_errors(fake: FakeOllama, mode: str) -> None:
    base = refused_url() if mode == "refused" else fake.url
    host = base.replace("http://", "http://alice:s3cr%40t@")
    fake.mode = "ok" if mode == "refused" else mode
    err = _code(host, timeout_s=1.0)
    probed = llm.probe(host, "llama3.2", timeout_s=1.0)
    for shown in (err.message, probed["error"] or ""):
        assert "s3cr" not in shown and "alice" not in shown, shown
    if mode != "refused":
        assert "***@127.0.0.1" in err.message or mode in ("404", "500", "hang")


def test_credentials_in_the_host_are_sent_as_basic_auth(fake: FakeOllama) -> None:
    import base64

    host = fake.url.replace("http://", "http://alice:s3cr%40t@")
    assert _ask(host, "hi") == "You said: hi"
    assert llm.probe(host, "llama3.2")["reachable"] is True
    expected = "Basic " + base64.b64encode(b"alice:s3cr@t").decode()
    assert [h.get("Authorization") for h in fake.headers] == [expected] * len(fake.headers)


def test_a_model_name_in_a_suggested_command_is_shell_quoted(fake: FakeOllama) -> None:
    import shlex

    fake.mode = "404"
    model = "llama3; rm -rf ~ $(touch x)"
    err = _code(fake.url, model=model)
    assert err.code == "model_not_pulled"
    command = err.message.split("Pull it with: ", 1)[1]
    assert shlex.split(command) == ["ollama", "pull", model]
    plain = _code(fake.url, model="qwen3:0.6b")
    assert plain.message.endswith("ollama pull qwen3:0.6b"), "plain names stay unquoted"


# ================================================================ peers that trickle or flood


def _chat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ollama-chat"]


def test_a_reply_that_drips_without_newline_ends_at_the_deadline(fake: FakeOllama) -> None:
    fake.mode = "drip"
    before = len(_chat_threads())
    start = time.monotonic()
    err = _code(fake.url, timeout_s=1.5)
    took = time.monotonic() - start
    assert err.code == "timeout"
    assert 1.4 <= took < 4.5
    assert until(lambda: len(_chat_threads()) <= before, 3), "the request thread outlived the deadline"
    assert until(lambda: fake.open_connections == 0, 3), "the connection outlived the deadline"
    assert fake.sent > 10, "the fake must really have dripped"


@pytest.mark.parametrize("mode", ["flood", "flood_line"])
def test_a_flood_is_capped(fake: FakeOllama, mode: str) -> None:
    fake.mode = mode
    start = time.monotonic()
    err = _code(fake.url, timeout_s=30.0)
    took = time.monotonic() - start
    assert err.code == "reply_too_large"
    assert "1 MB" in err.message
    assert took < 10, "a flood must be cut off at the cap, not read to the end"
    assert until(lambda: fake.open_connections == 0, 3)
    assert fake.sent < 32 * 1024 * 1024, f"the client kept reading: {fake.sent} bytes sent"


def test_cancel_closes_the_connection_at_once(fake: FakeOllama) -> None:
    fake.mode = "drip"
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    assert _cancelled(fake.url, timeout_s=30.0, cancel=cancel).code == "cancelled"
    assert until(lambda: fake.open_connections == 0 and not _chat_threads(), 2)


_SLOW_RESOLVER_CHECKS = """
import json, sys, time
from mcp_listen.ollama import client as llm
host, out = "http://ollama.example:11434", {}
began = time.monotonic()
try:
    llm.preflight(host, "llama3.2")
    out["preflight"] = "let through"
except Exception as exc:
    out["preflight"] = getattr(exc, "code", type(exc).__name__)
out["preflight_s"] = time.monotonic() - began
began = time.monotonic()
out["probe"] = llm.probe(host, "llama3.2", timeout_s=1.0)["error"]
out["probe_s"] = time.monotonic() - began
began = time.monotonic()
try:
    llm.ask(text="hi", model="llama3.2", system_prompt="", host=host, timeout_s=1.0)
except Exception as exc:
    out["ask"] = getattr(exc, "code", type(exc).__name__)
out["ask_s"] = time.monotonic() - began
print(json.dumps(out))
"""


def test_a_resolver_that_never_answers_holds_no_call_past_its_deadline(tmp_path: Path) -> None:
    """OLLAMA_HOST names a host and the DNS server is down: getaddrinfo has no timeout of its own
    (glibc waits 5 s x 2 attempts), so every exchange must end by its deadline around it. The
    pre-check lets the question through (the question has its own deadline and keeps the
    transcript) instead of holding the microphone back for 10 s and then refusing."""
    reason = dns_sink.unavailable()
    if reason:
        pytest.skip(reason)
    queries = tmp_path / "queries.log"
    cmd = dns_sink.wrap(queries, [sys.executable, "-c", _SLOW_RESOLVER_CHECKS], silent=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "ollama.example" in queries.read_text().split(), "the host name was never looked up"
    assert out["preflight"] == "let through" and out["preflight_s"] < 3 * llm.PREFLIGHT_TIMEOUT_S + 1, out
    assert "did not answer within 1 s" in out["probe"] and out["probe_s"] < 4, out
    assert out["ask"] == "timeout" and out["ask_s"] < 4, out


def test_doctor_shows_the_host_redacted_and_quotes_the_pull_command(fake: FakeOllama) -> None:
    import shlex

    from mcp_listen.cli import doctor
    from mcp_listen.config import load_settings

    host = fake.url.replace("http://", "http://alice:s3cr%40t@")
    settings = load_settings({"OLLAMA_HOST": host})
    model = "llama3; rm -rf ~"
    checks = doctor.check_ollama(settings, model)
    fake.mode = "500"
    checks += doctor.check_ollama(settings, model)
    shown = repr([check.public() for check in checks])
    assert "***@127.0.0.1" in shown
    assert "alice" not in shown and "s3cr" not in shown
    pull = next(c for c in checks if c.id == "ollama_model" and (c.remedy or "").startswith("ollama pull"))
    assert shlex.split(pull.remedy) == ["ollama", "pull", model]


@pytest.mark.parametrize(
    "raw, normal, shown",
    [
        ("http://u:p@host", "http://u:p@host:11434", "http://***@host:11434"),
        ("https://u:p%40ss@host:8443/ollama", "https://u:p%40ss@host:8443/ollama", "https://***@host:8443/ollama"),
        ("u:p@[::1]:5", "http://u:p@[::1]:5", "http://***@[::1]:5"),
        ("localhost:1234", "http://localhost:1234", "http://localhost:1234"),
    ],
)
def test_host_credentials_are_kept_for_use_and_redacted_for_show(raw: str, normal: str, shown: str) -> None:
    from mcp_listen.config.urls import redact_url

    assert normalize_ollama_host(raw) == normal
    assert redact_url(normal) == shown


@pytest.mark.parametrize("raw", ["http://host?token=x", "host#frag", "ftp://host"])
def test_host_with_query_fragment_or_other_scheme_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        normalize_ollama_host(raw)
