"""The echo cancellers bench/barge.py sets beside the server's own (WebRTC AEC3 from pywebrtc-audio with
the linear echo model of duplex/doubletalk.py): bench-only, none of them is a dependency.

- livekit's AudioProcessingModule (PyPI `livekit`, Apache-2.0, wheels): WebRTC's APM with its default
  AEC3, 10 ms frames. It exposes no echo statistics (nor does pywebrtc-audio): ERLE is measured here.
- Speex's MDF canceller with its residual echo suppression (libspeexdsp, BSD; Debian's libspeexdsp1),
  through a ctypes binding of its own: the PyPI wrappers are unmaintained, source-only, or (speexdsp-aec)
  under a proprietary licence. No wheel brings libspeexdsp to a user, so it could only ever stay here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import numpy as np

RATE = 16000
SPEEX_FRAME = 128
"""Speex's frame: 8 ms, a power of two (its FFT), four to a 512-sample window."""
SPEEX_TAIL_S = 0.2
SPEEX_ECHO_SET_SAMPLING_RATE = 24
SPEEX_PREPROCESS_SET_ECHO_STATE = 24
SPEEX_PREPROCESS_SET_DENOISE = 0


class Speex:
    """speex_echo_cancellation then speex_preprocess_run (denoise off) with the echo state: the linear
    filter, then its residual echo suppressor."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(ctypes.util.find_library("speexdsp") or "libspeexdsp.so.1")
        short = ctypes.POINTER(ctypes.c_int16)
        for name, args, result in (
            ("speex_echo_state_init", [ctypes.c_int, ctypes.c_int], ctypes.c_void_p),
            ("speex_echo_ctl", [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p], ctypes.c_int),
            ("speex_echo_cancellation", [ctypes.c_void_p, short, short, short], None),
            ("speex_echo_state_reset", [ctypes.c_void_p], None),
            ("speex_echo_state_destroy", [ctypes.c_void_p], None),
            ("speex_preprocess_state_init", [ctypes.c_int, ctypes.c_int], ctypes.c_void_p),
            ("speex_preprocess_ctl", [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p], ctypes.c_int),
            ("speex_preprocess_run", [ctypes.c_void_p, short], ctypes.c_int),
            ("speex_preprocess_state_destroy", [ctypes.c_void_p], None),
        ):
            function = getattr(lib, name)
            function.argtypes, function.restype = args, result
        self._lib = lib
        self._echo = lib.speex_echo_state_init(SPEEX_FRAME, int(SPEEX_TAIL_S * RATE))
        lib.speex_echo_ctl(self._echo, SPEEX_ECHO_SET_SAMPLING_RATE, ctypes.byref(ctypes.c_int(RATE)))
        self._pre = self._preprocessor()

    def _preprocessor(self) -> Any:
        lib = self._lib
        pre = lib.speex_preprocess_state_init(SPEEX_FRAME, RATE)
        lib.speex_preprocess_ctl(pre, SPEEX_PREPROCESS_SET_DENOISE, ctypes.byref(ctypes.c_int(0)))
        lib.speex_preprocess_ctl(pre, SPEEX_PREPROCESS_SET_ECHO_STATE, ctypes.c_void_p(self._echo))
        return pre

    def clean(self, near: Any, far: Any) -> Any:
        lib, short = self._lib, ctypes.POINTER(ctypes.c_int16)
        near, far = np.ascontiguousarray(near, np.int16), np.ascontiguousarray(far, np.int16)
        out = np.empty_like(near)
        for start in range(0, len(near), SPEEX_FRAME):
            frame = slice(start, start + SPEEX_FRAME)
            n, f, o = (samples[frame].ctypes.data_as(short) for samples in (near, far, out))
            lib.speex_echo_cancellation(self._echo, n, f, o)
            lib.speex_preprocess_run(self._pre, o)
        return out

    def reset(self) -> None:
        self._lib.speex_echo_state_reset(self._echo)
        self._lib.speex_preprocess_state_destroy(self._pre)
        self._pre = self._preprocessor()

    def __del__(self) -> None:
        lib = getattr(self, "_lib", None)
        if lib is not None:
            lib.speex_preprocess_state_destroy(self._pre)
            lib.speex_echo_state_destroy(self._echo)


class LiveKit:
    """livekit's APM (echo cancellation and its high-pass filter) in 10 ms frames: the window comes out one
    frame (10 ms) late, the carry of 512-sample windows into 160-sample frames."""

    FRAME = RATE // 100

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        from livekit import rtc

        self._rtc = rtc
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)
        self._near = self._far = np.zeros(0, np.int16)  # replaced, never written into
        self._out = np.zeros(self.FRAME, np.int16)

    def _frame(self, samples: Any) -> Any:
        return self._rtc.AudioFrame(samples.tobytes(), RATE, 1, self.FRAME)

    def clean(self, near: Any, far: Any) -> Any:
        self._near = np.concatenate([self._near, near.astype(np.int16)])
        self._far = np.concatenate([self._far, far.astype(np.int16)])
        done = []
        while len(self._near) >= self.FRAME:
            reverse, frame = self._frame(self._far[: self.FRAME]), self._frame(self._near[: self.FRAME])
            self._apm.process_reverse_stream(reverse)
            self._apm.process_stream(frame)
            done.append(np.frombuffer(bytes(frame.data), np.int16))
            self._near, self._far = self._near[self.FRAME :], self._far[self.FRAME :]
        self._out = np.concatenate([self._out, *done])
        out, self._out = self._out[: len(near)], self._out[len(near) :]
        return out


class RecordingCanceller:
    """A canceller (the server's own by default), keeping what went in and came out (for the ERLE)."""

    def __init__(self, inner: Any = None) -> None:
        from mcp_listen.duplex.echo import Canceller

        self._inner = inner or Canceller()
        self.pairs: list[tuple[Any, Any]] = []

    def clean(self, near: Any, far: Any) -> Any:
        out = self._inner.clean(near, far)
        self.pairs.append((near, out))
        return out

    def reset(self) -> None:
        self._inner.reset()


def erle_db(pairs: list[tuple[Any, Any]], first: int, last: int) -> float | None:
    """Echo return loss enhancement over windows [first, last): what went in against what came out."""
    chosen = pairs[first:last]
    if not chosen:
        return None
    near = np.concatenate([p[0] for p in chosen]).astype(np.float64)
    out = np.concatenate([p[1] for p in chosen]).astype(np.float64)
    if not near.any():
        return None
    return round(10 * np.log10(np.mean(near**2) / max(np.mean(out**2), 1e-3)), 1)


class Unlearnt:
    """An echo model that never learns: the turn decides by the rule on the canceller alone."""

    resets = 0

    def process(self, near: Any, far: Any) -> tuple[Any, Any]:
        from mcp_listen.duplex.doubletalk import Explained

        return near, Explained(0.0, 0.0, 0.0, False)

    def learn(self, near: Any, far: Any) -> None: ...

    def reset(self) -> None: ...


OPTIONS: dict[str, dict[str, Any]] = {
    "product": {"what": "AEC3 (pywebrtc-audio) + linear echo model", "licence": "Apache-2.0 + own code"},
    "aec3": {"what": "AEC3 (pywebrtc-audio), strict rule alone", "licence": "Apache-2.0 (BSD-3 WebRTC)"},
    "livekit": {"what": "livekit APM (AEC3 + high-pass), strict rule alone", "licence": "Apache-2.0"},
    "speex": {"what": "Speex MDF + residual suppression, strict rule alone", "licence": "BSD-3 (Debian only)"},
}
"""Each option: the canceller, and whether the linear echo model decides while it has learnt the path."""


def parts(option: str) -> tuple[Any, Any]:
    """The canceller and the echo model of one option (None: the server's own)."""
    if option == "product":
        return None, None
    canceller = {"aec3": None, "livekit": LiveKit, "speex": Speex}[option]
    return (canceller() if canceller else None), Unlearnt()
