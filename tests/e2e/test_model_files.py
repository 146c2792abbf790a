"""whisper_model is caller input: no file may crash, hang or starve the server (issue 13, items 4-5).

The bad files are built from the real tiny.en (tests/model_files.py): widened to all-F32, re-typed
tensor by tensor, a sparse file whose header asks for 67 GB; plus a genuine model under an
address-space limit, FIFOs, and descriptor paths. Anything that could abort runs in a child
process (a script, or the real server over stdio), so a regression fails a test instead of
killing the test run.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import audio_assets as A
import model_files as M
import pytest
from rpc import RawServer, error_of, server_env, tool_call

from mcp_listen.errors import TranscriptionError
from mcp_listen.whisper import admission as C
from mcp_listen.whisper import ggml
from mcp_listen.whisper import memory as MM
from mcp_listen.whisper import model_file as F
from mcp_listen.whisper import probe as P
from mcp_listen.whisper import transcriber as T

REPO = Path(__file__).resolve().parents[2]
EXIT_S = 10.0


def _refused(path: Path) -> TranscriptionError:
    with pytest.raises(TranscriptionError) as err:
        C.validate_model_file(path)
    return err.value


def _child(code: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GGML_NO_BACKTRACE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


LOAD_AND_TRANSCRIBE = """
import sys, numpy as np
from mcp_listen.whisper import memory as MM
from mcp_listen.whisper import transcriber as T
from mcp_listen.errors import TranscriptionError
{setup}
t = T.Transcriber(2)
try:
    t.load(sys.argv[1])
    t.transcribe(np.zeros(16000, np.float32), path=sys.argv[1])
    print("loaded")
except TranscriptionError as e:
    print(e.code + "|" + e.message)
print("alive")
"""


def _load_in_child(path: Path, setup: str = "") -> tuple[str, subprocess.CompletedProcess]:
    """Load + transcribe `path` in a fresh process: (its first line, the process)."""
    done = _child(LOAD_AND_TRANSCRIBE.format(setup=setup), str(path))
    assert done.returncode == 0, f"the process died (status {done.returncode}): {done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert lines[-1] == "alive", done.stdout
    return lines[0], done


@pytest.fixture(scope="module")
def f32_model(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return M.all_f32(model_path, tmp_path_factory.mktemp("f32") / "ggml-tiny.en-f32.bin")


@pytest.fixture(scope="module")
def giant(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path, claimed = M.sparse_giant(model_path, tmp_path_factory.mktemp("giant") / "ggml-giant.bin")
    yield path, claimed
    path.unlink()


# =============================================================== item 4: files that abort whisper.cpp


def test_all_f32_model_is_refused_before_whisper_sees_it(f32_model: Path) -> None:
    """whisper.cpp loads it, then aborts in its first convolution (GGML_ASSERT F16)."""
    err = _refused(f32_model)
    assert err.code == "model_invalid" and "F32" in err.message
    first, _ = _load_in_child(f32_model)
    assert first.startswith("model_invalid|") and "F32" in first


def test_sparse_giant_is_refused_for_memory(giant: tuple[Path, int]) -> None:
    """Every tensor is there and fits the file (a sparse one): only the memory check can say no."""
    path, claimed = giant
    available = MM._meminfo_available()
    assert claimed > 60e9 and available is not None and claimed > available, "this test needs < 60 GB free"
    started = time.perf_counter()
    err = _refused(path)
    assert time.perf_counter() - started < 10  # a walk of headers, not a read of 60 GB
    assert err.code == "model_invalid" and "MemAvailable" in err.message and "MB" in err.message
    first, _ = _load_in_child(path)
    assert first.startswith("model_invalid|") and "MemAvailable" in first


@pytest.mark.parametrize(
    "name, ttype, why",
    [
        ("encoder.conv1.bias", 1, "'encoder.conv1.bias' is f16, this whisper.cpp build needs f32"),
        ("encoder.blocks.0.attn.query.weight", 0, "'encoder.blocks.0.attn.query.weight' is f32"),
        ("encoder.conv2.weight", 0, "'encoder.conv2.weight' is f32"),
        ("decoder.ln.weight", 99, "'decoder.ln.weight' is type 99"),
    ],
)
def test_tensor_types_are_checked_per_name(model_path: Path, tmp_path: Path, name: str, ttype: int, why: str) -> None:
    """Each tensor must have the type whisper_model_load gives its name, not just a plausible size."""

    def retype(t: M.Tensor) -> M.Tensor:
        if t.name != name:
            return t
        if ttype in (0, 1) and ttype != t.ttype:
            t = M.to_f32(t) if ttype == 0 else M.Tensor(t.name, t.dims, 1, b"\0" * (len(t.data) // 2))
        return M.Tensor(t.name, t.dims, ttype, t.data)

    path = M.retyped(model_path, tmp_path / "ggml-tiny.en.bin", 1, retype)
    err = _refused(path)
    assert err.code == "model_invalid" and why in err.message, err.message


@pytest.mark.parametrize(
    "field, value",
    [("n_vocab", 1000), ("n_audio_ctx", 3000), ("n_mels", 81), ("n_audio_head", 7), ("ftype", 4), ("ftype", 12)],
)
def test_header_values_whisper_cannot_run(model_path: Path, tmp_path: Path, field: str, value: int) -> None:
    """Token ids, the 30 s window and head sizes are fixed in whisper.cpp's code; q4_K needs rows of 256."""
    hp, middle, tensors = M.split(model_path)
    hp[field] = value
    err = _refused(M.write(tmp_path / "ggml-tiny.en.bin", hp, middle, tensors))
    assert err.code == "model_invalid", err.message


def test_quantization_version_in_ftype_is_understood(model_path: Path, tmp_path: Path) -> None:
    """Quantized files say ftype = 2000 + type (GGML_QNT_VERSION 2); F16 with a version is still F16."""
    hp, middle, tensors = M.split(model_path)
    hp["ftype"] = 2001
    C.validate_model_file(M.write(tmp_path / "ggml-tiny.en.bin", hp, middle, tensors))


def test_a_genuine_model_under_an_address_space_limit(model_path: Path) -> None:
    """RLIMIT_AS too small for the load: a named error, not GGML_ASSERT(ctx->mem_buffer != NULL)."""
    setup = (
        "import resource\n"
        "size = MM._proc_kb('/proc/self/status', 'VmSize')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + 200_000_000, resource.RLIM_INFINITY))\n"
    )
    first, _ = _load_in_child(model_path, setup)
    assert first.startswith("model_invalid|") and "RLIMIT_AS" in first, first


def test_the_memory_estimate_is_enough_but_not_much_more(model_path: Path) -> None:
    """Under a limit of exactly what the check asks for, the model loads and transcribes."""
    with open(model_path, "rb") as f:
        needs = ggml.memory_needed(ggml.read_model(f, model_path.stat().st_size), 2)
    setup = (
        "import resource\n"
        "import _pywhispercpp\n"
        "size = MM._proc_kb('/proc/self/status', 'VmSize')\n"
        f"resource.setrlimit(resource.RLIMIT_AS, (size + {needs.address} + 64_000_000, resource.RLIM_INFINITY))\n"
    )
    first, _ = _load_in_child(model_path, setup)
    assert first == "loaded"
    measured = _measured_address_space(model_path)
    print(f"\naddress space: estimate {needs.address / 1e6:.0f} MB, measured {measured / 1e6:.0f} MB")
    assert measured <= needs.address <= measured * 1.5


def _measured_address_space(model_path: Path) -> int:
    code = (
        "import sys, numpy as np\n"
        "from mcp_listen.whisper import memory as MM, transcriber as T\n"
        "import _pywhispercpp\n"
        "before = MM._proc_kb('/proc/self/status', 'VmSize')\n"
        "t = T.Transcriber(2)\n"
        "t.transcribe(np.zeros(48000, np.float32), path=sys.argv[1])\n"
        "print(MM._proc_kb('/proc/self/status', 'VmSize') - before)\n"
    )
    done = _child(code, str(model_path))
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


BYPASS_CHECKS = (
    "from pathlib import Path\n"
    "from mcp_listen.whisper import ggml, admission as C\n"
    "real = Path(sys.argv[2])\n"
    "with open(real, 'rb') as f:\n"
    "    REAL = ggml.read_model(f, real.stat().st_size)\n"
    "C._walk = lambda mf: REAL  # as if the checks had missed this file\n"
)


@pytest.mark.parametrize("which", ["f32", "giant"])
def test_an_abort_never_takes_the_process_down(
    which: str, f32_model: Path, giant: tuple[Path, int], model_path: Path
) -> None:
    """With the static checks bypassed, whisper.cpp really aborts: in the probe process, not here."""
    path = f32_model if which == "f32" else giant[0]
    code = LOAD_AND_TRANSCRIBE.format(setup=BYPASS_CHECKS)
    done = _child(code, str(path), str(model_path))
    assert done.returncode == 0, f"the process died (status {done.returncode}): {done.stderr[-2000:]}"
    first = done.stdout.splitlines()[0]
    assert first.startswith("model_invalid|") and "SIGABRT" in first and "GGML_ASSERT" in first, first


def test_probe_cost(model_path: Path) -> None:
    """What isolating the first load costs (paid once per file and process, while the user talks)."""
    P._whisper_module()
    took = []
    for _ in range(5):
        P._probes.clear()
        with F._opened(model_path) as mf:
            started = time.perf_counter()
            P._probe(mf)
            took.append(time.perf_counter() - started)
    print(f"\nprobe of tiny.en: median {statistics.median(took) * 1000:.0f} ms, {[round(t * 1000) for t in took]}")
    assert statistics.median(took) < 30


def test_probe_ahead_runs_while_the_caller_records(model_path: Path) -> None:
    """The server validates with probe_ahead before the microphone opens: the test load runs in
    the background, and the load (when speech is heard) waits for that same run."""
    P._probes.clear()
    started = time.perf_counter()
    C.validate_model_file(model_path, probe_ahead=True)
    returned = time.perf_counter() - started
    with F._opened(model_path) as mf:
        run = P._probes[mf.key]
        assert run.done.wait(60) and run.error is None
        P._probe(mf)  # passed: nothing new is started
        assert P._probes[mf.key] is run
    print(f"\nvalidate_model_file(probe_ahead=True) returned after {returned * 1000:.0f} ms")


def test_a_failed_probe_is_reported_once_then_retried(f32_model: Path, model_path: Path) -> None:
    code = BYPASS_CHECKS.replace("sys.argv[2]", "sys.argv[1]") + (
        "for attempt in range(2):\n"
        "    try:\n"
        "        C.validate_model_file(sys.argv[2], probe_ahead=True)\n"
        "        T.Transcriber(1).load(sys.argv[2])\n"
        "    except TranscriptionError as e:\n"
        "        print(e.code, 'SIGABRT' in e.message)\n"
    )
    done = _child(
        "import sys\nfrom mcp_listen.whisper import admission as C, transcriber as T\n"
        "from mcp_listen.errors import TranscriptionError\n" + code,
        str(model_path),
        str(f32_model),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["model_invalid", "True"] * 2


def test_checks_probe_and_load_read_the_file_that_was_opened(model_path: Path, tmp_path: Path) -> None:
    """Swapping the name after the open changes nothing: everything reads the open descriptor."""
    path = tmp_path / "ggml-tiny.en.bin"
    shutil.copyfile(model_path, path)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"<html>not a model</html>")
    pw = P._whisper_module()
    with F._opened(path) as mf:
        os.replace(bad, path)
        C._walked.clear()
        P._probes.pop(mf.key, None)
        C._check(mf, 1)
        P._probe(mf)
        model, _ = T._load_model(pw, mf, 1)
        del model
    assert _refused(path).code == "model_invalid"


# =============================================================== item 5: files that block


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "ggml-base.en.bin"
    os.mkfifo(fifo)
    errors: list[TranscriptionError] = []
    worker = threading.Thread(target=lambda: errors.append(_refused(fifo)), daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "validating a FIFO blocked"
    assert errors[0].code == "model_invalid" and "pipe (FIFO)" in errors[0].message


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/proc/self/fd/0"])
def test_special_files_are_refused_by_type(path: str) -> None:
    err = _refused(Path(path))
    assert err.code == "model_invalid" and "not a whisper model file; it was not read" in err.message


def _call(name: str, server: RawServer, arguments: dict) -> dict:
    msg = tool_call(server, name, arguments)
    server.send(msg)
    return server.wait_for(msg["id"], 30)


def _results(server: RawServer, ids: set[int], timeout: float) -> dict[int, dict]:
    """The results of every request in `ids`, in whatever order they arrive."""
    deadline, got = time.monotonic() + timeout, {}
    while set(got) != ids:
        msg = server.messages.get(timeout=max(0.01, deadline - time.monotonic()))
        if msg.get("id") in ids:
            got[msg["id"]] = msg["result"]
    return got


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return server_env(MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "recordings"))


def test_fifo_calls_never_starve_the_server(env: dict[str, str], tmp_path: Path) -> None:
    """50 calls naming a FIFO: each a named error at once; tools/list still answers; EOF exits."""
    fifo = tmp_path / "ggml-base.en.bin"
    os.mkfifo(fifo)
    with RawServer(env, stderr_path=tmp_path / "stderr.log") as server:
        server.initialize()
        baseline = _threads(server.proc.pid)
        calls = [tool_call(server, "transcribe_voice", {"whisper_model": str(fifo)}) for _ in range(50)]
        server.send(*calls)
        for result in _results(server, {msg["id"] for msg in calls}, 60).values():
            assert result["isError"] and error_of(result)["error"]["code"] == "model_invalid"
            assert "pipe (FIFO)" in error_of(result)["error"]["message"]
        assert "tools" in server.call("tools/list", {}, timeout=10)["result"]
        assert _threads(server.proc.pid) <= baseline + 10, "tool threads were left behind"
        server.close_stdin()
        assert server.wait_exit(EXIT_S) == 0


def test_descriptor_paths_never_read_the_wire(env: dict[str, str], tmp_path: Path) -> None:
    """/proc/self/fd/N as whisper_model, for the server's stdin and its private copy of the wire:
    a named error, nothing read, and the next request (sent in the same write) is answered."""
    with RawServer(env, stderr_path=tmp_path / "stderr.log") as server:
        server.initialize()
        wire_in, wire_out = _wire_fds(server)
        paths = ["/proc/self/fd/0", f"/proc/self/fd/{wire_in}", f"/dev/fd/{wire_in}", f"/proc/self/fd/{wire_out}"]
        for path in paths:
            bad = tool_call(server, "transcribe_voice", {"whisper_model": path})
            after = server.request("tools/list", {})
            server.send(bad, after)
            got = _results(server, {bad["id"], after["id"]}, 30)
            error = error_of(got[bad["id"]])["error"]
            assert error["code"] == "model_invalid" and "it was not read" in error["message"], error
            assert "tools" in got[after["id"]]
        status = _call("get_status", server, {})["result"]
        assert status["structuredContent"]["recording"] is False


def _wire_fds(server: RawServer) -> tuple[int, int]:
    """The server's private copies of its stdin and stdout pipes (while serving, fd 0 reads
    /dev/null and fd 1 writes to stderr; the wire lives on other descriptors)."""
    pid = server.proc.pid
    ours = [os.readlink(f"/proc/self/fd/{pipe.fileno()}") for pipe in (server.proc.stdin, server.proc.stdout)]
    theirs = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    found = [min(fd for fd, target in theirs.items() if target == pipe and fd > 2) for pipe in ours]
    return found[0], found[1]


def test_tool_threads_do_not_use_the_stdin_readers_pool() -> None:
    """45 tool calls stuck in their threads: anyio's default pool (which reads stdin) still has room."""
    import anyio
    import anyio.to_thread

    from mcp_listen.server.app import Call

    class Ctx:
        meta = None

    release = threading.Event()
    answered: list[int] = []

    async def main() -> None:
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(45):
                    tg.start_soon(Call(Ctx()).in_thread, release.wait)
                await anyio.sleep(0.5)
                with anyio.fail_after(5):
                    answered.append(await anyio.to_thread.run_sync(lambda: 1))
                release.set()
        finally:
            release.set()

    anyio.run(main)
    assert answered == [1]


# =============================================================== the same through the real server


def test_memory_limited_server_says_so_and_keeps_serving(env: dict[str, str], model_path: Path, tmp_path: Path) -> None:
    """A genuine model, a server whose address space is capped (prlimit): model_invalid naming the
    limit, before the microphone opens; the server answers the next request."""
    with RawServer(env, stderr_path=tmp_path / "stderr.log") as server:
        server.initialize()
        size = int(_status(server.proc.pid, "VmSize")) * 1024
        resource.prlimit(server.proc.pid, resource.RLIMIT_AS, (size + 200_000_000, resource.RLIM_INFINITY))
        reply = _call("transcribe_voice", server, {"whisper_model": str(model_path)})["result"]
        error = error_of(reply)["error"]
        assert error["code"] == "model_invalid" and "RLIMIT_AS" in error["message"], error
        assert "tools" in server.call("tools/list", {}, timeout=10)["result"]
        assert server.proc.poll() is None


def _status(pid: int, field: str) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(line.split()[1] for line in f if line.startswith(field + ":"))


@pytest.mark.parametrize("which", ["f32", "giant"])
def test_server_survives_crashing_models_while_the_user_speaks(
    which: str, vmic, f32_model: Path, giant: tuple[Path, int], tmp_path: Path
) -> None:
    """The whole path a user takes: speech is heard, whisper would load. A named error, no crash."""
    path = f32_model if which == "f32" else giant[0]
    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "recordings"))
    with RawServer(env, stderr_path=tmp_path / "stderr.log") as server:
        server.initialize()
        msg = tool_call(server, "transcribe_voice", {"whisper_model": str(path), "duration_ms": 6000})
        server.send(msg)
        player = vmic.play(A.concat([A.silence(300), A.speech("testing one two three")]), block=False)
        try:
            reply = server.wait_for(msg["id"], 60)["result"]
        finally:
            player.wait()
        assert error_of(reply)["error"]["code"] == "model_invalid", json.dumps(reply)
        assert "tools" in server.call("tools/list", {}, timeout=10)["result"]
        assert server.proc.poll() is None


def test_a_quantized_model_is_accepted_and_transcribes(model_path: Path, jfk_wav: Path, tmp_path: Path) -> None:
    """The type rules are not just strict: tiny.en quantized to q8_0 the way whisper.cpp's tool
    does it passes, and transcribes the JFK sample word for word (in a child: it could abort)."""
    path = M.q8_0(model_path, tmp_path / "ggml-tiny.en-q8_0.bin")
    assert path.stat().st_size < model_path.stat().st_size * 0.6
    C.validate_model_file(path)
    code = (
        "import sys, wave, numpy as np\n"
        "from mcp_listen.whisper import transcriber as T, text as W\n"
        "w = wave.open(sys.argv[2])\n"
        "audio = np.frombuffer(w.readframes(w.getnframes()), dtype='<i2')\n"
        "print(T.Transcriber(2).transcribe(W.condition(audio), path=sys.argv[1]))\n"
    )
    done = _child(code, str(path), str(jfk_wav))
    assert done.returncode == 0, done.stderr[-2000:]
    words = "".join(c for c in done.stdout.lower() if c.isalpha() or c == " ").split()
    jfk = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"
    assert words == jfk.split()
