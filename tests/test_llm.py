"""llm.ask and llm.probe against a real HTTP server speaking Ollama's API (tests/fake_ollama.py)."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest

from fake_ollama import FakeOllama, refused_url
from mcp_listen import llm
from mcp_listen.config import normalize_ollama_host
from mcp_listen.errors import LLMError


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        yield server


def _ask(host: str, text: str = "what time is it", **kw) -> str:
    args = dict(text=text, model="llama3.2", system_prompt="Answer briefly.", host=host, timeout_s=10.0)
    args.update(kw)
    return llm.ask(**args)


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
    err = _code(fake.url, timeout_s=30.0, cancel=cancel)
    took = time.monotonic() - start
    assert err.code == "cancelled"
    assert took < 1.5  # set at 0.5 s: stops within 1 s of it


def test_already_cancelled_sends_nothing_useful(fake: FakeOllama) -> None:
    cancel = threading.Event()
    cancel.set()
    assert _code(fake.url, cancel=cancel).code == "cancelled"


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
        "reachable": True, "version": "0.12.0", "model_available": True, "error": None,
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
    with pytest.raises(LLMError):
        _ask(fake.url, cancel=cancel)
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
