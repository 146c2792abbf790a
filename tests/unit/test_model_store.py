"""model_store against a real HTTP server on loopback: success, 404, cut body, wrong checksum,
non-model body, bodies too large or too slow, a planted .partial link, Ctrl-C / SIGTERM / SIGHUP
mid-download, credentials in MCP_LISTEN_MODELS_URL. After every failure the folder holds no
model and no .partial file."""

from __future__ import annotations

import base64
import gzip
import hashlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mcp_listen.config import Settings
from mcp_listen.errors import TranscriptionError, command
from mcp_listen.whisper import store as model_store

REPO = Path(__file__).resolve().parents[2]
MODEL_BYTES = b"lmgg" + bytes(range(256)) * 2000  # ~0.5 MB, starts like a GGML file
MODEL_SHA1 = hashlib.sha1(MODEL_BYTES).hexdigest()
BOMB = gzip.compress(b"lmgg" + b"\0" * (20 << 20))  # ~20 KB that unpacks to 20 MB
CREDENTIALS = "bob:hunter2"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        self.server.auth.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        route = {
            "/m/ggml-good.bin": self._good,
            "/m/ggml-tiny.en.bin": self._good,
            "/m/ggml-html.bin": self._html,
            "/m/ggml-cut.bin": self._cut,
            "/m/ggml-slow.bin": self._slow,
            "/m/ggml-moved.bin": self._redirect,
            "/m/ggml-broken.bin": self._error,
            "/m/ggml-huge.bin": self._huge,
            "/m/ggml-endless.bin": self._endless,
            "/m/ggml-bomb.bin": self._bomb,
            "/m/ggml-trickle.bin": self._trickle,
        }.get(self.path, self._missing)
        route()

    def _send(
        self, status: int, body: bytes, length: int | None = None, ctype: str = "application/octet-stream"
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _good(self) -> None:
        self._send(200, MODEL_BYTES)

    def _html(self) -> None:
        self._send(200, b"<!DOCTYPE html><html>Sign in to continue</html>", ctype="text/html")

    def _missing(self) -> None:
        self._send(404, b"Entry not found", ctype="text/plain")

    def _error(self) -> None:
        self._send(503, b"busy", ctype="text/plain")

    def _redirect(self) -> None:
        self.send_response(302)
        self.send_header("Location", "/m/ggml-good.bin")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _cut(self) -> None:
        self._send(200, MODEL_BYTES[: len(MODEL_BYTES) // 2], length=len(MODEL_BYTES))
        self.wfile.flush()
        self.close_connection = True

    def _slow(self) -> None:
        """64 KB every 50 ms of a 100 MB body, for at most 20 s: time to press Ctrl-C."""
        self.send_response(200)
        self.send_header("Content-Length", str(100 << 20))
        self.end_headers()
        self.close_connection = True
        deadline = time.monotonic() + 20
        chunk = b"lmgg" + b"\0" * (64 * 1024 - 4)
        try:
            while time.monotonic() < deadline:
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(0.05)
                chunk = b"\0" * len(chunk)
        except OSError:
            pass

    def _huge(self) -> None:
        """Announces 10 GiB, sends a little, then holds the connection for 10 s."""
        self._send(200, b"lmgg" + b"\0" * 1000, length=10 << 30)
        self.wfile.flush()
        self.close_connection = True
        time.sleep(10)

    def _endless(self) -> None:
        """No Content-Length: 64 KB blocks as fast as the client takes them, for at most 20 s."""
        self.send_response(200)
        self.end_headers()
        self.close_connection = True
        self._stream(b"lmgg" + b"\0" * (64 * 1024 - 4), pause_s=0, for_s=20)

    def _bomb(self) -> None:
        """A gzip body whose Content-Length is the packed size: it unpacks to 1000 times that."""
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(BOMB)))
        self.end_headers()
        self.wfile.write(BOMB)

    def _trickle(self) -> None:
        """One byte every 20 ms of a 100 KB body, for at most 20 s: each read returns in time."""
        self.send_response(200)
        self.send_header("Content-Length", str(100_000))
        self.end_headers()
        self.close_connection = True
        self.wfile.write(b"lmgg")
        self._stream(b"\0", pause_s=0.02, for_s=20)

    def _stream(self, block: bytes, pause_s: float, for_s: float) -> None:
        deadline = time.monotonic() + for_s
        try:
            while time.monotonic() < deadline:
                self.wfile.write(block)
                self.wfile.flush()
                time.sleep(pause_s)
        except OSError:
            pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.paths = []  # type: ignore[attr-defined]
    httpd.auth = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _settings(server: ThreadingHTTPServer, tmp_path: Path) -> Settings:
    host, port = server.server_address[:2]
    return Settings(models_dir=tmp_path / "models", models_url=f"http://{host}:{port}/m")


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{CREDENTIALS}@", 1)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _pull_error(name: str, settings: Settings, **kw) -> TranscriptionError:
    with pytest.raises(TranscriptionError) as err:
        model_store.pull(name, settings, progress=False, **kw)
    return err.value


def test_pull_success_verifies_and_renames(server, tmp_path: Path) -> None:
    settings = _settings(server, tmp_path)
    path = model_store.pull("good", settings, progress=False, hashes={"good": MODEL_SHA1})
    assert path == tmp_path / "models" / "ggml-good.bin"
    assert path.read_bytes() == MODEL_BYTES
    assert _files(tmp_path / "models") == ["ggml-good.bin"]
    assert (tmp_path / "models").stat().st_mode & 0o777 == 0o700
    infos = model_store.list_models(settings)
    assert [(m.name, m.size_bytes, m.path) for m in infos] == [("good", len(MODEL_BYTES), path)]


def test_existing_verified_model_is_not_downloaded_again(server, tmp_path: Path) -> None:
    settings = _settings(server, tmp_path)
    model_store.pull("good", settings, progress=False, hashes={"good": MODEL_SHA1})
    model_store.pull("good", settings, progress=False, hashes={"good": MODEL_SHA1})
    assert server.paths == ["/m/ggml-good.bin"]
    model_store.pull("good", settings, progress=False, hashes={"good": MODEL_SHA1}, force=True)
    assert len(server.paths) == 2


def test_redirect_is_followed(server, tmp_path: Path) -> None:
    path = model_store.pull("moved", _settings(server, tmp_path), progress=False, hashes={"moved": MODEL_SHA1})
    assert path.read_bytes() == MODEL_BYTES


def test_progress_goes_to_stderr_only(server, tmp_path: Path, capfd) -> None:
    model_store.pull("good", _settings(server, tmp_path), progress=True, hashes={})
    out, _err = capfd.readouterr()
    assert out == ""


def test_404_leaves_nothing(server, tmp_path: Path) -> None:
    err = _pull_error("missing", _settings(server, tmp_path))
    assert err.code == "download_failed" and "404" in err.message and "base.en" in err.message
    assert _files(tmp_path / "models") == []


def test_http_error_leaves_nothing(server, tmp_path: Path) -> None:
    err = _pull_error("broken", _settings(server, tmp_path))
    assert err.code == "download_failed" and "503" in err.message
    assert _files(tmp_path / "models") == []


def test_connection_cut_mid_body_leaves_nothing(server, tmp_path: Path) -> None:
    err = _pull_error("cut", _settings(server, tmp_path), hashes={})
    assert err.code == "download_failed"
    assert _files(tmp_path / "models") == []


def test_wrong_checksum_leaves_nothing(server, tmp_path: Path) -> None:
    err = _pull_error("good", _settings(server, tmp_path), hashes={"good": "0" * 40})
    assert err.code == "checksum_mismatch"
    assert _files(tmp_path / "models") == []


def test_standard_name_is_checked_against_the_published_table(server, tmp_path: Path) -> None:
    """A 'tiny.en' that is not the published file must fail the pinned SHA-1."""
    err = _pull_error("tiny.en", _settings(server, tmp_path))
    assert err.code == "checksum_mismatch"
    assert model_store.STANDARD_MODELS_SHA1["tiny.en"] in err.message
    assert _files(tmp_path / "models") == []


def test_non_model_body_leaves_nothing(server, tmp_path: Path) -> None:
    err = _pull_error("html", _settings(server, tmp_path))
    assert err.code == "download_failed" and "GGML" in err.message
    assert _files(tmp_path / "models") == []


def test_unreachable_server(tmp_path: Path) -> None:
    settings = Settings(models_dir=tmp_path / "models", models_url=f"http://127.0.0.1:{_free_port()}")
    assert _pull_error("tiny", settings).code == "download_failed"
    assert _files(tmp_path / "models") == []


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "Base.en",
        "",
        "a/b",
        ".hidden",
        "x y",
        "base..en",
        "tiny\n",
        pytest.param("a" * 65, id="65 chars"),
        pytest.param("a" * 300, id="300 chars"),
    ],
)
def test_bad_names_are_refused_before_any_request(server, tmp_path: Path, name: str) -> None:
    assert _pull_error(name, _settings(server, tmp_path)).code == "unknown_model"
    assert server.paths == []


def test_longest_name_is_asked_for(server, tmp_path: Path) -> None:
    name = "a" * model_store.MAX_NAME_CHARS
    assert _pull_error(name, _settings(server, tmp_path)).code == "download_failed"  # a 404
    assert server.paths == [f"/m/ggml-{name}.bin"]


def test_invalid_models_url_is_a_download_failure(tmp_path: Path) -> None:
    settings = Settings(models_dir=tmp_path / "models", models_url="http://127.0.0.1:abc/m")
    err = _pull_error("tiny", settings)
    assert err.code == "download_failed" and "InvalidURL" in err.message
    assert _files(tmp_path / "models") == []


@pytest.mark.parametrize("name", ["missing", "broken", "unreachable"])
def test_errors_never_show_the_url_credentials(server, tmp_path: Path, name: str) -> None:
    url = f"http://127.0.0.1:{_free_port()}/m" if name == "unreachable" else _settings(server, tmp_path).models_url
    settings = Settings(models_dir=tmp_path / "models", models_url=_with_credentials(url))
    err = _pull_error(name, settings)
    assert err.code == "download_failed" and "http://***@127.0.0.1:" in err.message
    assert "hunter2" not in err.message and "bob" not in err.message
    assert _files(tmp_path / "models") == []


def test_httpx_error_text_never_shows_the_url_credentials(tmp_path: Path, monkeypatch) -> None:
    """httpx puts URLs in some messages; one that would carry the credentials is not repeated."""
    import httpx

    url = _with_credentials(f"http://127.0.0.1:{_free_port()}/m")

    def refuse(self, request):
        raise httpx.ConnectError(f"cannot connect to {url}/ggml-tiny.bin", request=request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", refuse)
    err = _pull_error("tiny", Settings(models_dir=tmp_path / "models", models_url=url))
    assert err.code == "download_failed" and "ConnectError" in err.message
    assert "hunter2" not in err.message and "bob" not in err.message


def test_credentials_are_sent_but_never_logged(server, tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    settings = _settings(server, tmp_path)
    settings = Settings(models_dir=settings.models_dir, models_url=_with_credentials(settings.models_url))
    model_store.pull("good", settings, progress=False, hashes={"good": MODEL_SHA1})
    basic = base64.b64encode(CREDENTIALS.encode()).decode()
    assert server.auth == [f"Basic {basic}"]
    assert "hunter2" not in caplog.text and basic not in caplog.text


@pytest.mark.parametrize("leftover", ["link to a file", "dangling link", "stale file"])
def test_a_leftover_partial_is_replaced_never_written_through(server, tmp_path: Path, leftover: str) -> None:
    folder, victim = tmp_path / "models", tmp_path / "victim.txt"
    folder.mkdir(mode=0o700)
    partial = folder / "ggml-good.bin.partial"
    if leftover == "stale file":
        partial.write_bytes(b"")  # what a SIGKILLed pull leaves
    else:
        if leftover == "link to a file":
            victim.write_bytes(b"precious")
        partial.symlink_to(victim)
    path = model_store.pull("good", _settings(server, tmp_path), progress=False, hashes={"good": MODEL_SHA1})
    assert not path.is_symlink() and path.read_bytes() == MODEL_BYTES
    assert path.stat().st_mode & 0o777 == 0o600
    assert _files(folder) == ["ggml-good.bin"]
    if leftover == "link to a file":
        assert victim.read_bytes() == b"precious"
    else:
        assert not victim.exists()


def test_a_planted_partial_link_is_not_written_through_by_a_failed_pull(server, tmp_path: Path) -> None:
    folder, victim = tmp_path / "models", tmp_path / "victim.txt"
    folder.mkdir(mode=0o700)
    victim.write_bytes(b"precious")
    (folder / "ggml-cut.bin.partial").symlink_to(victim)
    assert _pull_error("cut", _settings(server, tmp_path), hashes={}).code == "download_failed"
    assert victim.read_bytes() == b"precious"
    assert _files(folder) == []


def test_announced_size_over_the_cap_is_refused_before_reading(server, tmp_path: Path) -> None:
    started = time.monotonic()
    err = _pull_error("huge", _settings(server, tmp_path), hashes={})
    assert time.monotonic() - started < 5  # the server holds the connection for 10 s
    assert err.code == "download_failed" and "announces" in err.message and "MCP_LISTEN_MODELS_URL" in err.message
    assert _files(tmp_path / "models") == []


@pytest.mark.parametrize("how", ["argument", "module constant"])
def test_body_without_a_size_stops_at_the_cap(server, tmp_path: Path, monkeypatch, how: str) -> None:
    kw = {"max_bytes": 1 << 20} if how == "argument" else {}
    if how == "module constant":
        monkeypatch.setattr(model_store, "MAX_MODEL_BYTES", 1 << 20)
    started = time.monotonic()
    err = _pull_error("endless", _settings(server, tmp_path), hashes={}, **kw)
    assert time.monotonic() - started < 5  # the server would go on for 20 s
    assert err.code == "download_failed" and "more than 1.0 MB" in err.message
    assert _files(tmp_path / "models") == []


def test_body_past_its_content_length_is_stopped(server, tmp_path: Path) -> None:
    err = _pull_error("bomb", _settings(server, tmp_path), hashes={})
    assert err.code == "download_failed" and "than the" in err.message and "it announced" in err.message
    assert _files(tmp_path / "models") == []


def test_trickle_ends_at_the_deadline(server, tmp_path: Path) -> None:
    started = time.monotonic()
    err = _pull_error("trickle", _settings(server, tmp_path), hashes={}, deadline_s=0.5)
    assert time.monotonic() - started < 5  # the server trickles for 20 s, each read in time
    assert err.code == "download_failed" and "took too long" in err.message
    assert command("models", "pull", "trickle") in err.message
    assert _files(tmp_path / "models") == []


def test_signal_handlers_are_restored_after_a_pull(server, tmp_path: Path) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    model_store.pull("good", _settings(server, tmp_path), progress=False, hashes={"good": MODEL_SHA1})
    assert {sig: signal.getsignal(sig) for sig in before} == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_mid_download_leaves_nothing(server, tmp_path: Path, sig: signal.Signals) -> None:
    host, port = server.server_address[:2]
    folder = tmp_path / "models"
    code = (  # each signal as a terminal or a service manager gives it, whatever the launcher left ignored
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
        "from pathlib import Path\n"
        "from mcp_listen.config import Settings\n"
        "from mcp_listen.whisper import store as model_store\n"
        "s = Settings(models_dir=Path(sys.argv[1]), models_url=sys.argv[2])\n"
        "model_store.pull('slow', s, progress=False)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(folder), f"http://{host}:{port}/m"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
    )
    partial = folder / "ggml-slow.bin.partial"
    deadline = time.monotonic() + 15
    while not (partial.exists() and partial.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert partial.exists(), "the download never started"
    child.send_signal(sig)
    _out, err = child.communicate(timeout=15)
    if sig == signal.SIGINT:
        assert child.returncode != 0 and b"KeyboardInterrupt" in err
    else:
        assert child.returncode == 128 + sig, err
    assert _files(folder) == []


def test_list_models_searches_folders_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "custom", tmp_path / "models"
    first.mkdir()
    second.mkdir()
    (first / "ggml-small.bin").write_bytes(b"lmgg1")
    (second / "ggml-base.en.bin").write_bytes(b"lmgg22")
    (second / "ggml-tiny.bin.partial").write_bytes(b"lmgg")
    (second / "notes.txt").write_text("x")
    settings = Settings(whisper_model_dir=first, models_dir=second)
    assert model_store.search_dirs(settings) == [first, second]
    found = model_store.list_models(settings)
    assert [(m.name, m.size_bytes) for m in found] == [("small", 5), ("base.en", 6)]
    assert model_store.list_models(Settings(models_dir=tmp_path / "absent")) == []


def test_standard_table_is_complete() -> None:
    assert set(model_store.STANDARD_MODELS) == {
        "tiny",
        "tiny.en",
        "base",
        "base.en",
        "small",
        "small.en",
        "medium",
        "medium.en",
        "large-v3",
        "large-v3-turbo",
    }
    assert all(len(h) == 40 and int(h, 16) >= 0 for h in model_store.STANDARD_MODELS_SHA1.values())


# ------------------------------------------------------------------ stale partials, the folder


def _slow_pull_in_a_child(server: ThreadingHTTPServer, folder: Path) -> subprocess.Popen:
    """Another process pulling ggml-slow.bin into `folder` (the server sends it for 20 s); returned once
    its partial holds bytes."""
    host, port = server.server_address[:2]
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from mcp_listen.config import Settings\n"
        "from mcp_listen.whisper import store as model_store\n"
        "model_store.pull('slow', Settings(models_dir=Path(sys.argv[1]), models_url=sys.argv[2]), progress=False)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(folder), f"http://{host}:{port}/m"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
    )
    partial = folder / "ggml-slow.bin.partial"
    deadline = time.monotonic() + 15
    while not (partial.exists() and partial.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert partial.exists(), "the other pull never started (15 s; a loaded machine?)"
    return child


def test_a_pull_removes_what_a_killed_pull_left_but_never_a_live_pulls_partial(server, tmp_path: Path, caplog) -> None:
    folder = tmp_path / "models"
    child = _slow_pull_in_a_child(server, folder)
    try:
        model_store.pull("good", _settings(server, tmp_path), progress=False, hashes={"good": MODEL_SHA1})
        assert child.poll() is None and (folder / "ggml-slow.bin.partial").exists(), "a live pull's partial stays"
    finally:
        child.kill()  # SIGKILL: nothing of the child's cleanup runs
        child.communicate(timeout=15)
    assert (folder / "ggml-slow.bin.partial").exists(), "SIGKILL leaves the partial"
    caplog.set_level(logging.INFO)
    model_store.pull("good", _settings(server, tmp_path), progress=False, hashes={"good": MODEL_SHA1})
    assert _files(folder) == ["ggml-good.bin"], "the next pull, even of a model already there, removes it"
    assert "ggml-slow.bin.partial" in caplog.text


def test_a_second_pull_of_the_same_model_waits_for_none_and_spoils_nothing(server, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    child = _slow_pull_in_a_child(server, folder)
    try:
        err = _pull_error("slow", _settings(server, tmp_path), hashes={}, deadline_s=2)
        assert child.poll() is None and (folder / "ggml-slow.bin.partial").stat().st_size > 0
    finally:
        child.kill()
        child.communicate(timeout=15)
    assert err.code == "download_failed" and "already downloading" in err.message, err.message


def test_only_our_own_regular_partials_are_removed(server, tmp_path: Path) -> None:
    folder, victim = tmp_path / "models", tmp_path / "victim"
    folder.mkdir()
    victim.write_bytes(b"precious")
    (folder / "ggml-killed.bin.partial").write_bytes(b"lmgg")
    (folder / "ggml-link.bin.partial").symlink_to(victim)
    (folder / "ggml-dir.bin.partial").mkdir()
    for name in ("notes.partial", "ggml-Upper.bin.partial", "model.bin.partial"):
        (folder / name).write_bytes(b"mine")
    model_store.pull("good", _settings(server, tmp_path), progress=False, hashes={"good": MODEL_SHA1})
    assert _files(folder) == [
        "ggml-Upper.bin.partial", "ggml-dir.bin.partial", "ggml-good.bin", "ggml-link.bin.partial",
        "model.bin.partial", "notes.partial",
    ]  # fmt: skip
    assert victim.read_bytes() == b"precious"


@pytest.mark.parametrize("where", ["the folder", "a folder above it"])
def test_a_models_folder_that_is_a_file_says_so(server, tmp_path: Path, where: str) -> None:
    a_file = tmp_path / "models"
    a_file.write_bytes(b"not a folder")
    folder = a_file if where == "the folder" else a_file / "more"
    err = _pull_error("good", Settings(models_dir=folder, models_url=_settings(server, tmp_path).models_url))
    assert f"{a_file} is a file, not a folder" in err.message and ".partial" not in err.message, err.message
    assert command("models", "pull", "good") in err.message and server.paths == []
