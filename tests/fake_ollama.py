"""A real HTTP server on loopback that speaks the part of Ollama's API mcp-listen uses.

    with FakeOllama() as fake:          # mode "ok": replies "You said: <user text>"
        llm.ask(..., host=fake.url, ...)
        fake.mode = "hang"              # switch behaviour at any time
        fake.requests[-1]["messages"]   # JSON bodies received, in order

Modes: ok, 404, 500, hang (never answers until stop), empty (a done message with no content),
garbage (200 with a body that is not JSON), cut (half a stream, then the connection drops),
trickle (a token every 0.2 s, forever), drip (a byte every 0.05 s and never a newline),
flood (`flood_bytes` of well-formed reply, 64 KiB of text per line), flood_line (`flood_bytes`
with no newline at all), redirect (`redirect_status` to `redirect_to` + the same path).
"hang", "500" and "redirect" apply to every endpoint, the others to /api/chat. Streams use
chunked NDJSON like the real daemon. stop() is fast even while handlers hang: it wakes them
and shuts their sockets. `sent` counts the body bytes the streaming modes wrote, `headers`
the request headers received, `open_connections` the connections not yet closed.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("ok", "404", "500", "hang", "empty", "garbage", "cut", "trickle", "drip", "flood", "flood_line", "redirect")
CREATED_AT = "2025-01-01T00:00:00.000000Z"


def refused_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FakeOllama:
    def __init__(
        self,
        mode: str = "ok",
        reply: str | None = None,
        models: tuple[str, ...] = ("llama3.2:latest",),
        version: str = "0.12.0",
    ) -> None:
        self.mode = mode
        self.reply = reply
        self.models = list(models)
        self.version = version
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.redirect_status = 307
        self.redirect_to = "http://127.0.0.1:9"
        self.flood_bytes = 100 * 1024 * 1024
        self.sent = 0
        self.paths: list[tuple[str, str]] = []
        self.closing = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- lifecycle

    def start(self) -> FakeOllama:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        httpd.fake = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.closing.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    # -------------------------------------------------------------- behaviour

    def reply_for(self, body: dict[str, Any]) -> str:
        if self.reply is not None:
            return self.reply
        users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
        return f"You said: {users[-1] if users else ''}"

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    @property
    def fake(self) -> FakeOllama:
        return self.server.fake

    def setup(self) -> None:
        super().setup()
        self.fake._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.fake._track(self.connection, False)

    def log_message(self, *args: object) -> None:
        pass

    # -------------------------------------------------------------- routing

    def do_GET(self) -> None:
        self.fake.paths.append(("GET", self.path))
        self.fake.headers.append(dict(self.headers))
        if self._common_modes():
            return
        if self.path == "/api/version":
            self._json(200, {"version": self.fake.version})
        elif self.path == "/api/tags":
            self._json(200, {"models": [_model_entry(n) for n in self.fake.models]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        self.fake.paths.append(("POST", self.path))
        self.fake.headers.append(dict(self.headers))
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        self.fake.requests.append(body)
        if self._common_modes():
            return
        if self.path == "/api/chat":
            self._chat(body)
        elif self.path == "/api/show":
            self._show(body)
        else:
            self._json(404, {"error": "not found"})

    def _common_modes(self) -> bool:
        mode = self.fake.mode
        if mode == "hang":
            self.fake.closing.wait()
            self.close_connection = True
            return True
        if mode == "500":
            self._json(500, {"error": "fake internal server error"})
            return True
        if mode == "redirect":
            self.send_response(self.fake.redirect_status)
            self.send_header("Location", self.fake.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        return False

    # -------------------------------------------------------------- endpoints

    def _show(self, body: dict[str, Any]) -> None:
        name = body.get("model") or body.get("name") or ""
        if _canon(name) not in {_canon(m) for m in self.fake.models}:
            self._json(404, {"error": f"model '{name}' not found"})
            return
        self._json(
            200,
            {
                "modelfile": "",
                "parameters": "",
                "template": "",
                "details": _details(),
                "model_info": {"general.architecture": "llama"},
                "capabilities": ["completion"],
                "modified_at": CREATED_AT,
            },
        )

    def _chat(self, body: dict[str, Any]) -> None:
        mode, model = self.fake.mode, body.get("model", "")
        stream = body.get("stream", True)
        if mode == "404":
            self._json(404, {"error": f'model "{model}" not found, try pulling it first'})
        elif mode == "garbage":
            self._raw(200, b"<html>this is not json</html>\n", "application/x-ndjson")
        elif mode == "empty":
            self._answer(model, [], stream)
        elif mode == "cut":
            self._start_stream()
            self._chunk(_part(model, "Half an ans", False))
            self.wfile.flush()
            self.close_connection = True  # no terminating chunk: the stream is cut
        elif mode == "trickle":
            self._trickle(model)
        elif mode in ("drip", "flood", "flood_line"):
            self._firehose(model, mode)
        else:
            text = self.fake.reply_for(body)
            self._answer(model, _split(text), stream)

    def _answer(self, model: str, pieces: list[str], stream: bool) -> None:
        if not stream:
            final = _part(model, "".join(pieces), True)
            self._json(200, final)
            return
        self._start_stream()
        for piece in pieces:
            self._chunk(_part(model, piece, False))
        self._chunk(_part(model, "", True))
        self._end_stream()

    def _trickle(self, model: str) -> None:
        self._start_stream()
        try:
            while not self.fake.closing.wait(0.2):
                self._chunk(_part(model, ".", False))
                self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

    def _firehose(self, model: str, mode: str) -> None:
        """drip: one byte per 0.05 s; flood / flood_line: flood_bytes as fast as the client reads."""
        self._start_stream()
        text = json.dumps(_part(model, "x" * 65536, False)).encode() + b"\n"
        piece = {"drip": b"x", "flood": text, "flood_line": b"x" * 65536}[mode]
        try:
            while not self.fake.closing.is_set() and (mode == "drip" or self.fake.sent < self.fake.flood_bytes):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                self.fake.sent += len(piece)
                if mode == "drip":
                    self.fake.closing.wait(0.05)
            self._chunk(_part(model, "", True))
            self._end_stream()
        except OSError:
            pass  # the client hung up: what a capped or timed-out client must do
        self.close_connection = True

    # -------------------------------------------------------------- wire helpers

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        self._raw(status, json.dumps(payload).encode(), "application/json; charset=utf-8")

    def _raw(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")


def _part(model: str, content: str, done: bool) -> dict[str, Any]:
    part: dict[str, Any] = {
        "model": model,
        "created_at": CREATED_AT,
        "message": {"role": "assistant", "content": content},
        "done": done,
    }
    if done:
        part.update(done_reason="stop", total_duration=1000, eval_count=len(content.split()))
    return part


def _split(text: str) -> list[str]:
    """Cut a reply into word-sized pieces, as a model streams tokens."""
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _canon(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


def _details() -> dict[str, Any]:
    return {"format": "gguf", "family": "llama", "parameter_size": "1B", "quantization_level": "Q4_K_M"}


def _model_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": CREATED_AT,
        "size": 1_000_000,
        "digest": "0" * 64,
        "details": _details(),
    }
