"""The Piper voices store: names, the hostile-file checks, listing, and `voices pull` against a
real HTTP server on loopback (the piper-voices layout, with and without voices.json)."""

from __future__ import annotations

import hashlib
import json
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

from mcp_listen.config import Settings, load_settings
from mcp_listen.errors import InvalidArgument, VoiceError, command
from mcp_listen.voice import check, names
from mcp_listen.voice import store as voice_store

REPO = Path(__file__).resolve().parents[2]
NAME = "en_US-test-medium"
FOLDER = "en/en_US/test/medium"
CONFIG = {
    "audio": {"sample_rate": 22050, "quality": "medium"},
    "espeak": {"voice": "en-us"},
    "phoneme_type": "espeak",
    "num_symbols": 4,
    "num_speakers": 1,
    "speaker_id_map": {},
    "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
    "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [3]},
    "language": {"code": "en_US"},
}
CONFIG_BYTES = json.dumps(CONFIG).encode()
ONNX_BYTES = b"\x08\x08\x12\x07pytorch" + bytes(range(256)) * 64  # ir_version 8, as Piper's exports
CARD = b"# Model card for test (medium)\n\n* License: CC0\x1b[2J\n"


def catalogue(md5: str | None = None, size: int | None = None) -> bytes:
    files = {
        f"{FOLDER}/{NAME}.onnx": {"size_bytes": size or len(ONNX_BYTES), "md5_digest": md5 or _md5(ONNX_BYTES)},
        f"{FOLDER}/{NAME}.onnx.json": {"size_bytes": len(CONFIG_BYTES), "md5_digest": _md5(CONFIG_BYTES)},
        f"{FOLDER}/MODEL_CARD": {"size_bytes": len(CARD), "md5_digest": _md5(CARD)},
    }
    return json.dumps({NAME: {"key": NAME, "files": files}}).encode()


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------- files


def make_voice(folder: Path, name: str = NAME, config: bytes = CONFIG_BYTES, onnx: bytes = ONNX_BYTES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.onnx.json").write_bytes(config)
    (folder / f"{name}.onnx").write_bytes(onnx)
    return folder / f"{name}.onnx"


def with_config(**changes: object) -> bytes:
    config = json.loads(CONFIG_BYTES)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = config
        for key in parents:
            target = target[key]
        if value is ...:
            target.pop(leaf)
        else:
            target[leaf] = value
    return json.dumps(config).encode()


def test_check_voice_reads_the_facts(tmp_path):
    info = check.check_voice(make_voice(tmp_path))
    assert (info.name, info.language, info.quality, info.sample_rate, info.num_speakers) == (
        NAME,
        "en_US",
        "medium",
        22050,
        1,
    )
    assert info.size_bytes == len(ONNX_BYTES) and info.config_path == tmp_path / f"{NAME}.onnx.json"


@pytest.mark.parametrize(
    "config, problem",
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"audio": ', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b"1" * 5000, ""),  # too long an integer for Python 3.11+ (not valid JSON), not an object for 3.10
        (b"[1, 2]", "not a JSON object"),
        (with_config(audio=...), "audio.sample_rate"),
        (with_config(audio__sample_rate=10**9), "audio.sample_rate"),
        (with_config(audio__sample_rate=22050.5), "audio.sample_rate"),
        (with_config(audio__sample_rate="22050"), "audio.sample_rate"),
        (with_config(num_speakers=True), "num_speakers"),
        (with_config(num_speakers=0), "num_speakers"),
        (with_config(num_symbols=...), "num_symbols"),
        (with_config(espeak=...), "espeak.voice"),
        (with_config(espeak__voice="en\nus"), "espeak.voice"),
        (with_config(phoneme_type="klingon"), "phoneme_type"),
        (with_config(phoneme_id_map={}), "phoneme_id_map"),
        (with_config(phoneme_id_map={"a": [4]}), "phoneme_id_map"),
        (with_config(phoneme_id_map={"a": "3"}), "phoneme_id_map"),
        (with_config(speaker_id_map=[1]), "speaker_id_map"),
        (with_config(inference__noise_scale=float("inf")), "inference.noise_scale"),
        (with_config(inference="fast"), "inference"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_config_is_voice_invalid_naming_the_field(tmp_path, config, problem):
    with pytest.raises(VoiceError) as caught:
        check.check_voice(make_voice(tmp_path, config=config))
    assert caught.value.code == "voice_invalid" and problem in caught.value.message
    assert command("voices", "pull", NAME) in caught.value.message


@pytest.mark.parametrize(
    "onnx, problem",
    [
        (b"RIFF" + b"\0" * 2000, "not an ONNX model"),
        (b"<!DOCTYPE html>" + b" " * 2000, "not an ONNX model"),
        (b"\x08\xff\xff\xff\xff\x0f" + b"\0" * 2000, "not an ONNX model"),  # an ir_version nobody has
        (b"\x08\x08", "bytes; a Piper voice has"),
    ],
)
def test_a_bad_network_is_voice_invalid(tmp_path, onnx, problem):
    with pytest.raises(VoiceError) as caught:
        check.check_voice(make_voice(tmp_path, onnx=onnx))
    assert caught.value.code == "voice_invalid" and problem in caught.value.message


def test_a_config_past_its_bound_is_not_read(tmp_path):
    onnx = make_voice(tmp_path)
    with open(onnx.with_name(onnx.name + ".json"), "wb") as f:
        f.truncate(check.MAX_CONFIG_BYTES + 1)  # sparse: nothing is really written
    with pytest.raises(VoiceError) as caught:
        check.check_voice(onnx)
    assert caught.value.code == "voice_invalid" and "more than the" in caught.value.message


@pytest.mark.parametrize("which", ["onnx", "onnx.json"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_special_file_is_refused_without_blocking(tmp_path, which, kind):
    onnx = make_voice(tmp_path)
    target = tmp_path / f"{NAME}.{which}"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    else:
        target.symlink_to("/dev/zero")
    with pytest.raises(VoiceError) as caught:  # a FIFO opened plainly would block this test forever
        check.check_voice(onnx)
    assert caught.value.code == "voice_invalid" and "it was not read" in caught.value.message


def test_a_missing_half_is_voice_not_found_naming_the_pull(tmp_path):
    onnx = make_voice(tmp_path)
    onnx.with_name(onnx.name + ".json").unlink()
    with pytest.raises(VoiceError) as caught:
        check.check_voice(onnx)
    assert caught.value.code == "voice_not_found" and command("voices", "pull", NAME) in caught.value.message


# ------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "name, folder",
    [
        ("en_US-lessac-medium", "en/en_US/lessac/medium"),
        ("zh_CN-huayan-x_low", "zh/zh_CN/huayan/x_low"),
        ("en_US-hfc_female-medium", "en/en_US/hfc_female/medium"),
        ("fil_PH-test1-high", "fil/fil_PH/test1/high"),
    ],
)
def test_voice_names_map_to_the_repository_layout(name, folder):
    assert names.parse_name(name).folder == folder


@pytest.mark.parametrize(
    "name",
    ["en_US-lessac", "en_us-lessac-medium", "en_US-../x-medium", "en_US-lessac-medium\n", "EN_US-a-low",
     "en_US-lessac-ultra", "/etc/passwd", "en_US-" + "a" * 100 + "-low", "", "en_US-lessac-medium.onnx"],
)  # fmt: skip
def test_pull_refuses_what_is_not_a_voice_name(tmp_path, name):
    with pytest.raises(VoiceError) as caught:
        voice_store.pull(name, Settings(voices_dirs=(tmp_path,), voices_url="http://127.0.0.1:9"), progress=False)
    assert caught.value.code == "unknown_voice" and names.SUGGESTED_VOICE in caught.value.message
    assert list(tmp_path.iterdir()) == []


def test_resolve_by_name_file_name_config_name_and_path(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    make_voice(second)
    make_voice(first, name="en_GB-other-low")
    dirs = [first, second]
    expected = second / f"{NAME}.onnx"
    for voice in (NAME, f"{NAME}.onnx", f"{NAME}.onnx.json", str(expected), f"  {NAME} "):
        assert names.resolve_voice(voice, dirs) == expected
    monkeypatch.chdir(tmp_path)
    assert names.resolve_voice(f"b/{NAME}", dirs).resolve() == expected  # a relative path: the working directory


def test_a_bare_name_is_not_looked_up_in_the_working_directory(tmp_path, monkeypatch):
    make_voice(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VoiceError) as caught:
        names.resolve_voice(NAME, [tmp_path / "voices"])
    assert caught.value.code == "voice_not_found"


def test_a_missing_voice_names_the_pull_command(tmp_path):
    with pytest.raises(VoiceError) as caught:
        names.resolve_voice("en_US-lessac-medium", [tmp_path])
    err = caught.value
    assert err.code == "voice_not_found" and err.stage == "speak"
    assert command("voices", "pull", "en_US-lessac-medium") in err.message and str(tmp_path) in err.message


@pytest.mark.parametrize("voice", ["x" * 1025, "en_US\x1b[31m-a-low", "a\nb", "", "   "])
def test_a_hostile_voice_argument_is_refused_before_any_lookup(tmp_path, voice):
    with pytest.raises(InvalidArgument):
        names.resolve_voice(voice, [tmp_path])


# ----------------------------------------------------------------------------------- settings


def test_voices_path_and_url_settings(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    settings = load_settings({"MCP_LISTEN_VOICES_PATH": f"{a}{os.pathsep}{os.pathsep}{b}{os.pathsep}",
                              "MCP_LISTEN_VOICES_URL": "http://mirror.local/piper/"})  # fmt: skip
    assert settings.voices_dirs == (a, b) and settings.voices_url == "http://mirror.local/piper"
    assert settings.problems == ()
    default = load_settings({})
    assert default.voices_dirs == (Path.home().absolute() / ".mcp-listen" / "voices",)
    bad = load_settings({"MCP_LISTEN_VOICES_PATH": os.pathsep, "MCP_LISTEN_VOICES_URL": "ftp://x"})
    assert len(bad.problems) == 2 and all("MCP_LISTEN_VOICES_" in p for p in bad.problems)


# ------------------------------------------------------------------------------------ listing


def test_list_voices_checks_each_and_keeps_folder_order(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    make_voice(first, name="en_GB-zed-low")
    make_voice(second)
    make_voice(second, name="de_DE-broken-low", config=b"{}")
    (second / f"{NAME}.onnx.partial").write_bytes(b"x")
    found = voice_store.list_voices(Settings(voices_dirs=(first, second, tmp_path / "none")))
    assert [(v.name, v.info is not None) for v in found] == [
        ("en_GB-zed-low", True),
        ("de_DE-broken-low", False),
        (NAME, True),
    ]
    assert "audio.sample_rate" in found[1].problem


# --------------------------------------------------------------------------------------- pull


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        self.server.auth.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        files = self.server.files  # type: ignore[attr-defined]
        if self.path == "/v/slow/" + FOLDER + f"/{NAME}.onnx":
            return self._slow()
        body = files.get(self.path.removeprefix("/v/"))
        if body is None:
            self._send(404, b"Entry not found")
        else:
            self._send(200, body)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _slow(self) -> None:
        """64 KB every 50 ms of a 100 MB body, for at most 20 s: time to press Ctrl-C."""
        self.send_response(200)
        self.send_header("Content-Length", str(100 << 20))
        self.end_headers()
        self.close_connection = True
        deadline, chunk = time.monotonic() + 20, ONNX_BYTES[:1024] + b"\0" * (63 * 1024)
        try:
            while time.monotonic() < deadline:
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass


def served(*, config: bytes = CONFIG_BYTES, onnx: bytes = ONNX_BYTES, index: bytes | None = None) -> dict:
    files = {f"{FOLDER}/{NAME}.onnx.json": config, f"{FOLDER}/{NAME}.onnx": onnx, f"{FOLDER}/MODEL_CARD": CARD}
    if index is not None:
        files["voices.json"] = index
    files["slow/" + f"{FOLDER}/{NAME}.onnx.json"] = config
    return files


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.paths = []  # type: ignore[attr-defined]
    httpd.auth = []  # type: ignore[attr-defined]
    httpd.files = served(index=catalogue())  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _settings(server: ThreadingHTTPServer, folder: Path, base: str = "v") -> Settings:
    host, port = server.server_address[:2]
    return Settings(voices_dirs=(folder, folder.parent / "second"), voices_url=f"http://{host}:{port}/{base}")


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


VOICE_FILES = [f"{NAME}.MODEL_CARD", f"{NAME}.onnx", f"{NAME}.onnx.json"]


def test_pull_verifies_md5_and_size_from_voices_json(server, tmp_path):
    folder = tmp_path / "voices"
    pulled = voice_store.pull(NAME, _settings(server, folder), progress=False, pinned={})
    assert pulled.verified == "md5 and size (voices.json)"
    assert pulled.info.path == folder / f"{NAME}.onnx" and pulled.info.sample_rate == 22050
    assert (folder / f"{NAME}.onnx").read_bytes() == ONNX_BYTES and _files(folder) == VOICE_FILES
    assert "License: CC0" in pulled.card and "\x1b" not in pulled.card, "control characters are dropped"
    assert f"/v/{FOLDER}/{NAME}.onnx" in server.paths and "/v/voices.json" in server.paths


def test_pull_with_a_pinned_sha256_skips_the_catalogue(server, tmp_path):
    pinned = {NAME: {".onnx": _sha256(ONNX_BYTES), ".onnx.json": _sha256(CONFIG_BYTES)}}
    pulled = voice_store.pull(NAME, _settings(server, tmp_path / "voices"), progress=False, pinned=pinned)
    assert pulled.verified == "sha256 (pinned)" and "/v/voices.json" not in server.paths
    again = voice_store.pull(NAME, _settings(server, tmp_path / "voices"), progress=False, pinned=pinned)
    assert again.verified == "already present"


@pytest.mark.parametrize(
    "change, code",
    [
        ({"pinned": {NAME: {".onnx": "0" * 64, ".onnx.json": _sha256(CONFIG_BYTES)}}}, "checksum_mismatch"),
        ({"index": catalogue(md5="0" * 32)}, "checksum_mismatch"),
        ({"index": catalogue(size=len(ONNX_BYTES) + 1)}, "checksum_mismatch"),
        ({"config": b'{"audio": {}}', "index": None}, "voice_invalid"),
        ({"onnx": b"<html>" + b" " * 4000, "index": None}, "voice_invalid"),
        ({"onnx": None}, "download_failed"),
    ],
    ids=["pinned sha256", "voices.json md5", "voices.json size", "bad config", "html page", "404"],
)
def test_a_failed_pull_leaves_nothing_behind(server, tmp_path, change, code):
    pinned = change.pop("pinned", {})
    files = served(**{k: v for k, v in change.items() if k != "index" and v is not None},
                   index=change.get("index", catalogue()))  # fmt: skip
    if change.get("onnx", "") is None:
        files.pop(f"{FOLDER}/{NAME}.onnx")
    server.files = files
    folder = tmp_path / "voices"
    with pytest.raises(VoiceError) as caught:
        voice_store.pull(NAME, _settings(server, folder), progress=False, pinned=pinned)
    assert caught.value.code == code, caught.value.message
    assert _files(folder) == []


def test_without_voices_json_the_pull_says_it_checked_the_structure_only(server, tmp_path, caplog):
    server.files = served(index=None)
    pulled = voice_store.pull(NAME, _settings(server, tmp_path / "voices"), progress=False, pinned={})
    assert pulled.verified == "structure only"
    assert any("structure only" in r.getMessage() for r in caplog.records)


def test_a_pull_goes_into_the_first_voices_folder_only(server, tmp_path):
    folder = tmp_path / "voices"
    voice_store.pull(NAME, _settings(server, folder), progress=False, pinned={})
    assert _files(folder) == VOICE_FILES and _files(tmp_path / "second") == []
    assert (folder.stat().st_mode & 0o777) == 0o700


def test_a_planted_partial_link_is_not_followed(server, tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (folder / f"{NAME}.onnx.partial").symlink_to(victim)
    voice_store.pull(NAME, _settings(server, folder), progress=False, pinned={})
    assert victim.read_bytes() == b"precious" and _files(folder) == VOICE_FILES


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_signal_mid_download_leaves_nothing(server, tmp_path, sig):
    folder = tmp_path / "voices"
    host, port = server.server_address[:2]
    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "from pathlib import Path\n"
        "from mcp_listen.config import Settings\n"
        "from mcp_listen.voice import store\n"
        "s = Settings(voices_dirs=(Path(sys.argv[1]),), voices_url=sys.argv[2])\n"
        f"store.pull({NAME!r}, s, progress=False, pinned={{}})\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(folder), f"http://{host}:{port}/v/slow"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
    )
    partial = folder / f"{NAME}.onnx.partial"
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


# ------------------------------------------------------------------- credentials, folders, text


def test_a_password_holding_a_slash_is_sent_and_no_part_of_it_is_shown(server, tmp_path):
    """`user:pass@` ends at the URL's last "@" (as redact_url reads it), so an unencoded "/" in the
    password is still the password: sent as basic auth, and in no message, whole or in part."""
    import base64

    host, port = server.server_address[:2]
    settings = Settings(voices_dirs=(tmp_path / "voices",), voices_url=f"http://kim:zq/xw@{host}:{port}/v")
    pulled = voice_store.pull(NAME, settings, progress=False, pinned={})
    assert pulled.verified == "md5 and size (voices.json)"
    assert set(server.auth) == {"Basic " + base64.b64encode(b"kim:zq/xw").decode()}
    bad_port = Settings(voices_dirs=settings.voices_dirs, voices_url="http://kim:zq/xw@127.0.0.1:nope/v")
    for failing, name in ((settings, "en_US-nothere-low"), (bad_port, NAME)):
        with pytest.raises(VoiceError) as caught:
            voice_store.pull(name, failing, progress=False, pinned={}, force=True)
        message = caught.value.message
        assert "http://***@127.0.0.1:" in message, message
        assert not any(secret in message for secret in ("kim", "zq", "xw")), message


@pytest.mark.parametrize("where", ["the folder", "a folder above it"])
def test_a_voices_path_that_is_a_file_says_so_and_how_to_fix_it(server, tmp_path, where):
    a_file = tmp_path / "voices"
    a_file.write_bytes(b"not a folder")
    folder = a_file if where == "the folder" else a_file / "more"
    with pytest.raises(VoiceError) as caught:
        voice_store.pull(NAME, _settings(server, folder), progress=False, pinned={})
    message = caught.value.message
    assert f"{a_file} is a file, not a folder" in message, message
    assert "MCP_LISTEN_VOICES_PATH" in message and command("voices", "pull", NAME) in message
    assert ".partial" not in message and server.paths == [], "refused before any download"
    assert a_file.read_bytes() == b"not a folder"


BIDI = "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c"
"""The direction marks, embeddings, overrides and isolates: U+202E shows what follows reversed."""


def test_a_card_and_a_config_lose_their_bidi_controls(server, tmp_path):
    server.files[f"{FOLDER}/MODEL_CARD"] = ("# Card\n\n* License: " + BIDI + "CC0\u202e txt.exe\n").encode()
    pulled = voice_store.pull(NAME, _settings(server, tmp_path / "voices"), progress=False, pinned={})
    assert "License: CC0 txt.exe" in pulled.card and not set(BIDI) & set(pulled.card), repr(pulled.card)
    reversed_code = make_voice(tmp_path / "other", config=with_config(language__code="en\u202eSU_"))
    assert check.check_voice(reversed_code).language == "en_US", "the name's language, not the reversed one"


def test_a_pull_first_removes_stale_partials_of_its_own_names_only(server, tmp_path, caplog):
    """What a SIGKILLed or SIGUSR1ed pull left: its own partial names, regular files only, removed (and
    said); anything else named .partial, a link or a folder in its place, is not ours to remove."""
    folder = tmp_path / "voices"
    folder.mkdir()
    stale = [f"en_GB-gone-low{s}.partial" for s in (".onnx", ".onnx.json", ".MODEL_CARD")] + [".voices.json.partial"]
    for name in stale:
        (folder / name).write_bytes(b"half")
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (folder / "en_GB-link-low.onnx.partial").symlink_to(victim)
    (folder / "en_GB-dir-low.onnx.partial").mkdir()
    others = ["notes.partial", "en_GB-gone-low.txt.partial", "not a voice.onnx.partial"]
    for name in others:
        (folder / name).write_bytes(b"mine")
    caplog.set_level(logging.INFO)
    voice_store.pull(NAME, _settings(server, folder), progress=False, pinned={})
    assert _files(folder) == sorted(
        [*VOICE_FILES, *others, "en_GB-link-low.onnx.partial", "en_GB-dir-low.onnx.partial"]
    )
    assert victim.read_bytes() == b"precious"
    said = caplog.text
    assert all(name in said for name in stale) and "notes.partial" not in said


# ------------------------------------------------------------------------------ the default voice


def test_the_default_voice_falls_back_to_the_voices_installed(tmp_path):
    """MCP_LISTEN_VOICE unset and en_US-lessac-medium absent: the only voice installed speaks (or the first
    by name of several), and the note says so and how to choose; set, the user's choice stands."""
    from mcp_listen.contract.limits import DEFAULT_VOICE
    from mcp_listen.engine.parts import Piper

    first, second = tmp_path / "first", tmp_path / "second"
    make_voice(second, name="en_GB-zed-low")
    only = voice_store.default_voice(Settings(voices_dirs=(first, second)))
    assert only.voice == "en_GB-zed-low" and DEFAULT_VOICE in only.note and "MCP_LISTEN_VOICE" in only.note
    assert Piper(Settings(voices_dirs=(first, second))).find(DEFAULT_VOICE).name == "en_GB-zed-low"
    make_voice(first, name="fr_FR-broken-low", config=b"{}")
    make_voice(second, name="de_DE-anna-low")
    several = voice_store.default_voice(Settings(voices_dirs=(first, second)))
    assert several.voice == "de_DE-anna-low" and "de_DE-anna-low, en_GB-zed-low" in several.note
    assert "fr_FR-broken-low" not in several.note, "a voice that fails its checks is not installed"
    chosen = load_settings(
        {"MCP_LISTEN_VOICES_PATH": f"{first}{os.pathsep}{second}", "MCP_LISTEN_VOICE": DEFAULT_VOICE}
    )
    assert voice_store.default_voice(chosen) == voice_store.DefaultVoice(DEFAULT_VOICE, None)
    with pytest.raises(VoiceError) as caught:
        Piper(chosen).find(DEFAULT_VOICE)
    assert caught.value.code == "voice_not_found"
    make_voice(second, name=DEFAULT_VOICE)
    assert voice_store.default_voice(Settings(voices_dirs=(first, second))).voice == DEFAULT_VOICE
    assert voice_store.default_voice(Settings(voices_dirs=(tmp_path / "none",))).note is None
