"""Piper synthesis: a checked voice loaded once, and text turned into int16 audio piece by piece.

piper-tts is the optional extra `speak` (GPL-3.0-or-later): `available()` says whether it is
installed without importing it, and nothing of piper or onnxruntime is imported before the
first call that speaks. The voice given here has passed voice/check.py: Piper reads its
config with bare `config["..."]` lookups and would crash on a hostile one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from mcp_listen.config.libraries import import_onnxruntime, installed
from mcp_listen.contract.results import Cancel
from mcp_listen.errors import VoiceError
from mcp_listen.voice.check import VoiceInfo
from mcp_listen.voice.pieces import ends_mid_clause, pieces
from mcp_listen.voice.readable import readable

SEAM_PAUSE_S = 0.04
"""The silence kept after the last sound of a piece cut inside a clause: with the ~60 ms Piper puts
before the next piece's first sound, the words join with a ~0.1 s pause instead of a sentence's ~0.2 s."""
SILENT = 300
"""An int16 level below which a sample counts as silence (-40 dBFS): Piper's trailing noise floor is lower."""

PIPER_MISSING = (
    "Speech output needs Piper, which is not installed. Install the extra: pip install 'mcp-listen[speak]' "
    "(or pipx install 'mcp-listen[speak]'), then restart the server."
)


def available() -> bool:
    """Whether piper-tts can be imported (speak_text is listed only then); imports nothing."""
    return installed("piper")


class Synthesizer:
    """The resident Piper voice: the last one used stays loaded (loading a voice takes ~0.3 s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: tuple[tuple[str, int], Any] | None = None

    def voice(self, info: VoiceInfo) -> Any:
        """The PiperVoice for `info`, loaded on first use and when the file changed."""
        key = (str(info.path), info.size_bytes)
        with self._lock:
            if self._loaded is None or self._loaded[0] != key:
                self._loaded = None  # the old network is freed before the new one loads
                self._loaded = (key, _load(info))
            return self._loaded[1]

    def speak(self, info: VoiceInfo, text: str, speed: float, stop: Cancel) -> Iterator[Any]:
        """int16 mono samples at info.sample_rate, one array per sentence, the short first piece first;
        stops between sentences once `stop` is set."""
        voice = self.voice(info)
        config = _synthesis_config(voice, speed)
        said = pieces(readable(text))  # Markdown, SSML and HTML marks are not read out
        for number, piece in enumerate(said, start=1):
            joins_next = number < len(said) and ends_mid_clause(piece)
            for chunk in _synthesized(voice, piece, config, info):
                if stop.is_set():
                    return
                samples = chunk.audio_int16_array
                yield trailing_silence_cut(samples, info.sample_rate) if joins_next else samples


def _synthesized(voice: Any, piece: str, config: Any, info: VoiceInfo) -> Iterator[Any]:
    """Piper's chunks of one piece. A voice whose .onnx.json lies about its network (a phoneme id
    past the network's symbol table: onnxruntime refuses the lookup mid-speech) is voice_invalid
    naming the file, not an internal error."""
    try:
        yield from voice.synthesize(piece, config)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors have no public base class
        raise VoiceError(
            f"Piper could not speak with the voice {info.path}: its network refused the input "
            f"({type(exc).__name__}); its .onnx.json does not match its .onnx. Pull it again, or choose another "
            "voice (mcp-listen voices lists them).",
            code="voice_invalid",
        ) from None


def trailing_silence_cut(samples: Any, sample_rate: int) -> Any:
    """`samples` with its trailing silence cut to SEAM_PAUSE_S (all of it kept when nothing is louder)."""
    import numpy as np

    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > SILENT)
    if not len(loud):
        return samples
    return samples[: int(loud[-1]) + 1 + int(SEAM_PAUSE_S * sample_rate)]


def _load(info: VoiceInfo) -> Any:
    try:
        import_onnxruntime()  # before piper imports it: telemetry off
        from piper import PiperVoice
    except ImportError:
        raise VoiceError(PIPER_MISSING, code="piper_missing") from None
    try:
        return PiperVoice.load(info.path, config_path=info.config_path)
    except Exception as exc:  # noqa: BLE001 - onnxruntime refusing a network that passed the checks
        raise VoiceError(
            f"Piper could not load the voice {info.path}: {type(exc).__name__}. Pull it again, or choose "
            "another voice (mcp-listen voices lists them).",
            code="voice_invalid",
        ) from None


def _synthesis_config(voice: Any, speed: float) -> Any:
    """Piper's length_scale is the time per phoneme: the voice's own divided by the speed."""
    from piper import SynthesisConfig

    own = getattr(voice.config, "length_scale", None) or 1.0
    return SynthesisConfig(length_scale=own / speed)
