"""Microphones with a fixed native format for tests: a private JACK server and a JACK client
whose output ports PortAudio's JACK host API lists as an input device.

Why JACK: the PulseAudio virtual microphone (tests/vmic.py) is reached through ALSA's pulse
plugin, which converts any rate and channel count, so "a device that only delivers 48 kHz
stereo" cannot be made there. PortAudio's JACK host API opens a device only at the server's
rate (anything else: paInvalidSampleRate, -9997) and with at most as many channels as the
client has ports (more: paInvalidChannelCount, -9998): a real device with a native format.

Shape:

    JackMic.play(16 kHz clip) -> soxr to the server rate -> this process's JACK client
        "<name>" with 1 or 2 output ports  ->  PortAudio (JACK host API) in the server child
    jackd --no-realtime -n <unique name> -d dummy -r <rate>   (no sound card, no /dev/snd)

The server has a name of its own (``JACK_DEFAULT_SERVER`` in the children's environment), so a
user's own JACK server (named "default") is neither found nor disturbed; it runs with a private
working directory, dies with the test process (PR_SET_PDEATHSIG) and is stopped by ``close()``.
JACK2 keeps its sockets and shared memory under /dev/shm/jack*, keyed by the server name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmic import _die_with_parent

if TYPE_CHECKING:
    import numpy as np

INSTALL_HINT = (
    "Install JACK and its Python client: apt-get install jackd2 (tools/dev setup --test does it) "
    "and pip install -e '.[test]' (JACK-Client)."
)
PERIOD_FRAMES = 512
CLIENT_TIMEOUT_MS = 10000
"""jackd drops a client that misses its process deadline by this much; generous on a loaded machine."""


class JackError(RuntimeError):
    pass


def missing() -> list[str]:
    """What is needed and not installed (jackd, the `jack` Python module)."""
    gaps = [] if shutil.which("jackd") else ["jackd (Debian package jackd2)"]
    try:
        import jack  # noqa: F401
    except (ImportError, OSError) as exc:
        gaps.append(f"the Python module jack (PyPI JACK-Client): {exc}")
    return gaps


class JackServer:
    """A private jackd on the dummy driver at one sample rate."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.name = f"mcpl-test-{os.getpid()}-{rate}"
        self.workdir = Path(tempfile.mkdtemp(prefix="jack-"))
        self.log_path = self.workdir / "jackd.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a child needs to find this server (and never start or find another one)."""
        return {"JACK_DEFAULT_SERVER": self.name, "JACK_NO_START_SERVER": "1", "JACK_NO_AUDIO_RESERVATION": "1"}

    def start(self, timeout: float = 15.0) -> None:
        cmd = [
            "jackd", "--no-realtime", "-n", self.name, "-t", str(CLIENT_TIMEOUT_MS),
            "-d", "dummy", "-r", str(self.rate), "-p", str(PERIOD_FRAMES), "-C", "0", "-P", "0",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("JACK_")}
        env.update(self.env, HOME=str(self.workdir))
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd, env=env, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import jack

        deadline = time.monotonic() + timeout
        jack.set_error_function(lambda message: None)  # "cannot connect" while jackd starts: expected
        try:
            self._poll_ready(jack, deadline, timeout)
        finally:
            jack.set_error_function(None)

    def _poll_ready(self, jack: Any, deadline: float, timeout: float) -> None:
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise JackError(f"jackd exited with {self._proc.returncode}. {self.log_tail()}")
            try:
                probe = jack.Client("ready-probe", servername=self.name, no_start_server=True)
            except jack.JackOpenError:
                if time.monotonic() > deadline:
                    raise JackError(f"jackd did not accept clients within {timeout:g} s. {self.log_tail()}") from None
                time.sleep(0.1)
                continue
            probe.close()
            return

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no jackd log)"
        return f"jackd log ({self.log_path}):\n" + "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


class JackMic:
    """A JACK client with `channels` output ports that plays 16 kHz clips at the server's rate
    (the same signal on every port) and silence in between."""

    def __init__(self, server: JackServer, name: str, channels: int) -> None:
        import jack

        self.server, self.name, self.channels = server, name, channels
        self._lock = threading.Lock()
        self._queue: list[tuple[Any, threading.Event]] = []
        self._pos = 0
        self._client = jack.Client(name, servername=server.name, no_start_server=True)
        self._ports = [self._client.outports.register(f"capture_{i + 1}") for i in range(channels)]
        self._client.set_process_callback(self._process)
        self._client.activate()

    @property
    def rate(self) -> int:
        return int(self._client.samplerate)

    def play(self, clip: str | Path, *, timeout: float = 120.0) -> None:
        """Play a 16 kHz mono WAV (as tests/audio_assets.py makes them); return when it has been delivered."""
        import audio_assets as A

        done = threading.Event()
        with self._lock:
            self._queue.append((self.at_rate(A.read_wav(clip)), done))
        if not done.wait(timeout):
            raise JackError(f"the JACK microphone did not play the clip within {timeout:g} s. {self.server.log_tail()}")

    def at_rate(self, samples: np.ndarray) -> np.ndarray:
        """16 kHz int16 -> float32 at the server's rate (what a microphone of that rate would capture)."""
        import numpy as np
        import soxr

        data = np.asarray(samples, dtype=np.float32) / 32768.0
        return soxr.resample(data, 16000, self.rate, quality="HQ").astype(np.float32)

    def _process(self, frames: int) -> None:
        """JACK's process callback: copy the next `frames` samples of the current clip to every port."""
        import numpy as np

        out = np.zeros(frames, dtype=np.float32)
        filled = 0
        with self._lock:
            while filled < frames and self._queue:
                clip, done = self._queue[0]
                take = min(frames - filled, len(clip) - self._pos)
                out[filled : filled + take] = clip[self._pos : self._pos + take]
                filled += take
                self._pos += take
                if self._pos >= len(clip):
                    self._queue.pop(0)
                    self._pos = 0
                    done.set()
        for port in self._ports:
            port.get_array()[:] = out

    def close(self) -> None:
        try:
            self._client.deactivate()
        finally:
            self._client.close()


class JackSpeaker:
    """A JACK client with one input port, which PortAudio's JACK host API lists as an output device
    that opens only at the server's rate: what it is sent is kept, to be checked afterwards."""

    def __init__(self, server: JackServer, name: str) -> None:
        import jack

        self.server, self.name = server, name
        self._lock = threading.Lock()
        self._blocks: list[Any] = []
        self._client = jack.Client(name, servername=server.name, no_start_server=True)
        self._port = self._client.inports.register("playback_1")
        self._client.set_process_callback(self._process)
        self._client.activate()

    @property
    def rate(self) -> int:
        return int(self._client.samplerate)

    def _process(self, frames: int) -> None:
        block = self._port.get_array().copy()
        with self._lock:
            self._blocks.append(block)

    def heard_16k(self) -> np.ndarray:
        """Everything received so far as 16 kHz int16 (what whisper takes)."""
        import numpy as np
        import soxr

        with self._lock:
            data = np.concatenate(self._blocks) if self._blocks else np.zeros(0, dtype=np.float32)
        at_16k = soxr.resample(data, self.rate, 16000, quality="HQ")
        return np.clip(np.rint(at_16k * 32768), -32768, 32767).astype(np.int16)

    def close(self) -> None:
        try:
            self._client.deactivate()
        finally:
            self._client.close()
