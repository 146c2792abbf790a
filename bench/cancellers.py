"""The echo cancellers bench/barge.py sets beside the server's own (WebRTC AEC3 from pywebrtc-audio with
the linear echo model of duplex/doubletalk.py): AEC3 with the strict rule alone, and the recording of
what each canceller was handed, for the ERLE.

livekit's APM and Speex's MDF canceller were benched here too, once; they were removed after that
comparison (bench/README.md, "Barge-in": the table keeps their figures).
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
}
"""Each option: the canceller, and whether the linear echo model decides while it has learnt the path."""


def parts(option: str) -> tuple[Any, Any]:
    """The canceller and the echo model of one option (None: the server's own; `aec3` never learns the path)."""
    return (None, None) if option == "product" else (None, Unlearnt())
