"""A virtual microphone for tests: a private PulseAudio daemon that PortAudio sees as an input.

Why: the tests talk to a real (virtual) microphone instead of mocking sounddevice. No root, no
kernel module, no system sound server is touched; it works when run as root (PulseAudio only
warns) and in CI containers without any sound hardware.

Shape (measured, see DESIGN.md "Virtual microphone for tests"):

    paplay --device=vmic_out  ->  null sink ``vmic_out`` (16 kHz mono s16le)
                                   |  monitor
                                   +-> remap source ``vmic``  <- PortAudio (ALSA pulse plugin)
                                   +-> 20 ms loopback -> null sink ``vmic_tick``

The loopback is essential: without a consumer asking for 20 ms the null sink renders in 2 s
blocks and captured audio arrives in bursts. PortAudio reaches the daemon through ALSA's pulse
plugin (Debian ``libasound2-plugins``), configured by a PRIVATE ``ALSA_CONFIG_PATH`` file that
defines ``pcm.vmic`` and ``pcm.!default`` (PortAudio 19.6 aborts the process when ALSA has no
``pcm.default``).

Client variables (``VirtualMic.env``) leave ``HOME`` alone: ``PULSE_COOKIE`` points the client
cookie into the private directory, so nothing is written under the real home.

Linux only (PulseAudio + ALSA), like the CI it serves.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
import wave
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

SINK = "vmic_out"
"""Null sink that test audio is played into."""
SOURCE = "vmic"
"""Normal (non-monitor) source exposing the sink's monitor; the default input device."""
TICK_SINK = "vmic_tick"
"""Second null sink, fed by a 20 ms loopback so the first one renders in small steps."""
RATE = 16000

REQUIRED_TOOLS = ("pulseaudio", "pactl", "paplay")
INSTALL_HINT = (
    "Install the Debian packages: apt-get install pulseaudio pulseaudio-utils "
    "libasound2-plugins libportaudio2 espeak-ng sox"
)

_ASSETS_DIR = Path(__file__).resolve().parent / "assets"
_UNIX_PATH_MAX = 100  # sockaddr_un.sun_path is 108 bytes; keep a margin


class VirtualMicError(RuntimeError):
    """The virtual microphone could not be started or used; the message says why."""


def missing_tools() -> list[str]:
    """Names of the programs/libraries the harness needs that are not installed."""
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if _alsa_pulse_plugin() is None:
        missing.append("libasound_module_pcm_pulse.so (libasound2-plugins)")
    return missing


def _alsa_pulse_plugin() -> Path | None:
    """Location of ALSA's pulse pcm plugin, or None when libasound2-plugins is missing."""
    for pattern in ("/usr/lib/*/alsa-lib", "/usr/lib/alsa-lib", "/usr/lib64/alsa-lib"):
        for folder in sorted(Path("/").glob(pattern.lstrip("/"))):
            candidate = folder / "libasound_module_pcm_pulse.so"
            if candidate.exists():
                return candidate
    return None


def _daemon_script(socket: Path) -> str:
    """The daemon's startup script. The socket is loaded LAST, so once a client can connect
    every sink and source already exists (readiness check = ``pactl info`` succeeds)."""
    return "\n".join(
        [
            f"load-module module-null-sink sink_name={SINK} rate={RATE} channels=1 format=s16le"
            f" sink_properties=device.description=vmic-speaker",
            f"load-module module-remap-source source_name={SOURCE} master={SINK}.monitor"
            f" channels=1 source_properties=device.description=vmic-microphone",
            f"load-module module-null-sink sink_name={TICK_SINK} rate={RATE} channels=1 format=s16le",
            f"load-module module-loopback source={SINK}.monitor sink={TICK_SINK}"
            f" latency_msec=20 source_dont_move=true sink_dont_move=true",
            # The null sink armed its first render for a 2 s block before the loopback asked
            # for 20 ms; a suspend/resume re-arms it, else capture stalls ~2 s after start.
            f"suspend-sink {SINK} 1",
            f"suspend-sink {SINK} 0",
            f"set-default-sink {SINK}",
            f"set-default-source {SOURCE}",
            f"load-module module-native-protocol-unix auth-anonymous=1 socket={socket}",
            "",
        ]
    )


_ALSA_VMIC_CONF = f"""\
# Private ALSA configuration for the mcp-listen test virtual microphone.
# Replaces the system configuration entirely (ALSA_CONFIG_PATH), so only these exist.
pcm.{SOURCE} {{
    type pulse
    device {SOURCE}
    hint {{ show on description "mcp-listen test virtual microphone" }}
}}
# PortAudio 19.6 aborts the process when there is no pcm.default. It records from the virtual
# microphone and plays into its sink (speak_text): what is played there is what it hears.
pcm.!default {{
    type asym
    capture.pcm {{ type pulse device {SOURCE} }}
    playback.pcm {{ type pulse device {SINK} }}
    hint {{ show on description "Default ALSA device (virtual microphone)" }}
}}
ctl.!default {{
    type pulse
}}
"""

# autospawn=no: once the daemon is stopped (device-loss tests) no client may start another one.
_CLIENT_CONF = "autospawn = no\n"


class VirtualMic:
    """A private PulseAudio daemon whose source ``vmic`` is PortAudio's default input.

    Use as ``with VirtualMic() as mic: ...`` or ``mic.start()`` ... ``mic.close()``.
    ``stop()`` kills only the daemon (the device disappears, as when a USB microphone is
    unplugged); ``start()`` brings it back with the same socket and configuration.
    """

    def __init__(self, workdir: str | Path | None = None, *, start_timeout: float = 10.0):
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else _make_workdir()
        self.start_timeout = start_timeout
        self.socket = self.workdir / "run" / "native"
        if len(str(self.socket)) > _UNIX_PATH_MAX:
            raise VirtualMicError(f"socket path too long for a unix socket: {self.socket}")
        self.log_path = self.workdir / "pulseaudio.log"
        self.alsa_config = self.workdir / "asound.conf"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file = None
        self._wav_counter = 0
        self.last_start_seconds: float | None = None
        """Wall time of the last successful start(), spawn to ready, for measurements."""
        self._write_files()
        atexit.register(self._atexit)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> VirtualMic:
        """Start the daemon and wait until a client can connect; idempotent."""
        if self.running:
            return self
        missing = missing_tools()
        if missing:
            raise VirtualMicError(f"missing: {', '.join(missing)}. {INSTALL_HINT}")
        self._clear_stale_runtime()
        began = time.monotonic()
        self._spawn()
        self.wait_ready()
        self.last_start_seconds = time.monotonic() - began
        return self

    def stop(self, *, hard: bool = False) -> None:
        """Kill the daemon (SIGTERM, or SIGKILL when ``hard``): every client loses the device.

        Open PortAudio streams in clients do not raise; their callbacks just stop."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            proc.send_signal(signal.SIGCONT)  # a frozen daemon acts on SIGTERM only once resumed
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def freeze(self) -> None:
        """Stop the daemon with SIGSTOP: a hung sound server. Clients' calls into it block (a stream
        open waits ~30 s), open streams deliver nothing and cannot close. ``thaw()`` resumes it."""
        if not self.running:
            raise VirtualMicError("the virtual microphone is not running; call start() first")
        self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Resume a daemon stopped by ``freeze()`` (SIGCONT); harmless when it is not frozen."""
        if self.running:
            self._proc.send_signal(signal.SIGCONT)

    def restart(self) -> VirtualMic:
        """stop() then start(): the device goes away and comes back under the same name."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the daemon and remove the private directory (if this object created it)."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> VirtualMic:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """True while the daemon process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until ``pactl info`` succeeds; raise VirtualMicError with the daemon log if
        the daemon dies or does not answer within ``timeout`` (default: start_timeout)."""
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while True:
            if not self.running:
                raise VirtualMicError(f"pulseaudio is not running.\n{self._log_tail()}")
            if self.socket.exists() and self._pactl_ok():
                return
            if time.monotonic() > deadline:
                raise VirtualMicError(
                    f"pulseaudio did not answer on {self.socket} within the timeout.\n{self._log_tail()}"
                )
            time.sleep(0.01)

    # --- what clients need -----------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Variables a CHILD process needs so that PortAudio in it sees ``vmic`` as the default
        input: merge them into the child's environment. HOME and XDG_RUNTIME_DIR are left
        alone (measured: not needed by clients)."""
        return {
            "PULSE_SERVER": f"unix:{self.socket}",
            "PULSE_COOKIE": str(self.workdir / "client-cookie"),
            "PULSE_CLIENTCONFIG": str(self.workdir / "client.conf"),
            "ALSA_CONFIG_PATH": str(self.alsa_config),
        }

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A complete environment for a child: ``base`` (default os.environ) plus ``env``."""
        merged = dict(os.environ if base is None else base)
        merged.update(self.env)
        return merged

    # --- playing audio into the microphone ----------------------------------------------------

    def play(self, wav_path: str | Path, *, block: bool = True) -> subprocess.Popen[bytes]:
        """Play a WAV file into the microphone with paplay.

        ``block=True`` waits until paplay has drained (the audio has gone through the sink) and
        raises VirtualMicError if paplay fails. ``block=False`` returns the running Popen; the
        caller waits on it (``proc.wait()``)."""
        if not self.running:
            raise VirtualMicError("the virtual microphone is not running; call start() first")
        proc = subprocess.Popen(
            ["paplay", f"--device={SINK}", str(wav_path)],
            env=self.child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if block:
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                message = err.decode(errors="replace")
                raise VirtualMicError(f"paplay failed ({proc.returncode}): {message}")
        return proc

    def play_samples(self, samples: np.ndarray, *, block: bool = True, rate: int = RATE) -> subprocess.Popen[bytes]:
        """Write int16 mono samples to a temporary WAV in the private directory and play it."""
        import numpy as np

        data = np.ascontiguousarray(samples, dtype=np.int16).reshape(-1)
        self._wav_counter += 1
        path = self.workdir / "play" / f"samples-{os.getpid()}-{self._wav_counter}.wav"
        path.parent.mkdir(exist_ok=True)
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(data.tobytes())
        proc = self.play(path, block=block)
        if block:
            path.unlink(missing_ok=True)
        return proc

    # --- internals ------------------------------------------------------------------------

    def _write_files(self) -> None:
        for sub in ("run", "state", "home", "play"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.workdir / "vmic.pa").write_text(_daemon_script(self.socket))
        self.alsa_config.write_text(_ALSA_VMIC_CONF)
        (self.workdir / "client.conf").write_text(_CLIENT_CONF)

    def _daemon_env(self) -> dict[str, str]:
        """The daemon runs with a private HOME/XDG_RUNTIME_DIR and no session bus, so it can
        neither find nor disturb a user's or the system's PulseAudio."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PULSE_", "DBUS_", "ALSA_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")
        }
        env.update(
            HOME=str(self.workdir / "home"),
            XDG_RUNTIME_DIR=str(self.workdir / "run"),
            XDG_CONFIG_HOME=str(self.workdir / "home" / ".config"),
            PULSE_RUNTIME_PATH=str(self.workdir / "run"),
            PULSE_STATE_PATH=str(self.workdir / "state"),
            PULSE_SERVER=f"unix:{self.socket}",
        )
        return env

    def _spawn(self) -> None:
        # Running as root needs no special flag: PulseAudio 16 only warns.
        cmd = [
            "pulseaudio", "-n", "-F", str(self.workdir / "vmic.pa"),
            "--daemonize=no", "--exit-idle-time=-1", "--disallow-exit",
            "--realtime=no", "--high-priority=no", "--use-pid-file=no",
            "--no-cpu-limit",  # its load limiter ends the daemon when a loaded CI machine makes it look busy
            "--disable-shm",  # PulseAudio 16's memfd block import can abort the daemon (pulseaudio#824,
            # seen here: memblock.c "Assertion 'n_imported > 0' failed"): audio goes over the socket
            "--log-target=stderr", "--log-level=notice",
        ]  # fmt: skip
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file.write(f"--- start {time.strftime('%H:%M:%S')} ---\n".encode())
        self._log_file.flush()
        self._proc = subprocess.Popen(
            cmd,
            env=self._daemon_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=self._log_file,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def _pactl_ok(self) -> bool:
        try:
            done = subprocess.run(
                ["pactl", "info"],
                env=self.child_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=5,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def _clear_stale_runtime(self) -> None:
        """A SIGKILLed daemon leaves its socket and pid file behind; remove them."""
        for name in ("native", "pid"):
            (self.workdir / "run" / name).unlink(missing_ok=True)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the daemon's log (every start appends to it), for error messages."""
        return self._log_tail(lines)

    def _log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no daemon log at {self.log_path})"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"pulseaudio log ({self.log_path}):\n{tail}"

    def _atexit(self) -> None:
        """Never leave a daemon behind when the test process ends without close()."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


def _make_workdir() -> Path:
    """A fresh private directory with a path short enough for a unix socket."""
    base = tempfile.gettempdir()
    if len(base) > 60:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="vmic-", dir=base))


def _die_with_parent() -> None:
    """Child-side: ask Linux to SIGTERM the daemon when the test process dies (even SIGKILL).

    Linux ties this to the THREAD that started the daemon: start() from the main thread (as
    the fixtures do), or the daemon dies when a short-lived worker thread exits."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; atexit covers normal exits
        pass


# --- in-process PortAudio -------------------------------------------------------------------


def refresh_portaudio(env: Mapping[str, str] | None = None) -> None:
    """Make sounddevice in THIS process re-read its ALSA configuration and devices.

    PortAudio reads ALSA's configuration and enumerates devices once, at initialisation; this
    re-initialises it. When ``env`` is given it is first copied into ``os.environ`` — that
    mutates the whole test process (and every child it starts afterwards), so call it once per
    session (the ``vmic`` fixture does, and restores the old values at the end). Do not call it
    while a stream is open.
    """
    if env is not None:
        os.environ.update(env)
    import sounddevice as sd

    sd._terminate()
    sd._initialize()


# --- environments for children that must NOT find audio ------------------------------------

_NO_PORTAUDIO_SITECUSTOMIZE = '''\
"""Test shim: hide PortAudio from this interpreter (mcp-listen tests, env_without_portaudio).

sounddevice locates libportaudio with ctypes.util.find_library("portaudio"), which on Linux
runs the absolute /sbin/ldconfig -p first, so a PATH shim cannot hide it. Returning None for
that name makes `import sounddevice` raise OSError("PortAudio library not found") exactly as on
a machine without libportaudio2.
"""
import ctypes.util as _util

_real_find_library = _util.find_library


def _find_library(name):
    if "portaudio" in name.lower():
        return None
    return _real_find_library(name)


_util.find_library = _find_library
'''

_ALSA_NO_INPUT_CONF = """\
# Private ALSA configuration with no usable device: pcm.default exists (PortAudio 19.6 aborts
# without one) but names a sound card that does not exist, so opening it fails and PortAudio
# enumerates nothing. No pulse plugin is referenced, so no sound server can be reached either.
pcm.!default {
    type hw
    card 99
    device 0
}
ctl.!default {
    type hw
    card 99
}
"""


def _env_dir() -> Path:
    folder = _ASSETS_DIR / "env"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _write_atomic(path: Path, text: str) -> Path:
    """Write only if the content differs, atomically (parallel test workers share the file)."""
    if path.exists() and path.read_text() == text:
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def env_without_portaudio(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A complete child environment in which ``import sounddevice`` raises
    ``OSError: PortAudio library not found``, as on a machine without libportaudio2.

    Nothing is uninstalled: a ``sitecustomize`` module prepended on PYTHONPATH makes
    ``ctypes.util.find_library`` return None for PortAudio (a PATH shim cannot work because
    ctypes runs /sbin/ldconfig by absolute path). Children started with ``python -I``/``-E``
    ignore PYTHONPATH and would still find the library. The shim shadows any other
    ``sitecustomize`` for that child.
    """
    shim_dir = _env_dir() / "no-portaudio"
    shim_dir.mkdir(exist_ok=True)
    _write_atomic(shim_dir / "sitecustomize.py", _NO_PORTAUDIO_SITECUSTOMIZE)
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(shim_dir) + (os.pathsep + old if old else "")
    return env


def env_no_input_devices(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A complete child environment in which PortAudio initialises fine but lists no device
    at all (so no input device): a private ALSA config whose only pcm is a missing card, and
    pulse pointed at a socket that does not exist with autospawn off.

    Opening an input stream there raises ``PortAudioError: Error querying device -1``.
    (PortAudio's OSS host API would still find a /dev/dsp on a machine that has one.)"""
    folder = _env_dir() / "no-input"
    folder.mkdir(exist_ok=True)
    conf = _write_atomic(folder / "asound.conf", _ALSA_NO_INPUT_CONF)
    client = _write_atomic(folder / "client.conf", _CLIENT_CONF)
    env = dict(os.environ if base is None else base)
    env.update(
        ALSA_CONFIG_PATH=str(conf),
        PULSE_SERVER=f"unix:{folder / 'no-such-socket'}",
        PULSE_CLIENTCONFIG=str(client),
    )
    return env
