"""Piper synthesis: a checked voice loaded once, and text turned into int16 audio piece by piece.

piper-tts is the optional extra `speak` (GPL-3.0-or-later): `available()` says whether it is
installed without importing it, and nothing of piper or onnxruntime is imported before the
first call that speaks. The voice given here has passed voice/check.py: Piper reads its
config with bare `config["..."]` lookups and would crash on a hostile one.

Piper's own phonemizer turns each piece into phonemes (`PiperVoice.phonemize`); its network then
renders at most MAX_RENDER_PHONEMES of them at a time, cut at word boundaries, so no text (spelled-out
letters, digits, a long run without punctuation) makes one inference that runs for seconds or takes
gigabytes. A stop aborts the inference in flight (onnxruntime's `RunOptions.terminate`), and each
inference hands its working memory back when it ends (the arena shrinkage run option): onnxruntime
would otherwise keep its largest one for the life of the process.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp_listen.config.libraries import import_onnxruntime, installed
from mcp_listen.contract.results import Cancel
from mcp_listen.errors import VoiceError
from mcp_listen.voice.check import VoiceInfo
from mcp_listen.voice.pieces import ends_mid_clause, pieces
from mcp_listen.voice.readable import readable
from mcp_listen.voice.spelled import refuse_spelled

MAX_RENDER_PHONEMES = 200
"""The most phonemes one inference renders at speed 1 (proportionally fewer when slower: the audio, and the
network's memory, grow with the length): ~9 s of speech, ~1 s of CPU and ~150 MB of onnxruntime's working
memory here (bench/README.md, "Hostile texts"). voice/pieces.py's longest run, 30 words, has ~150 in English,
so ordinary sentences are rendered whole; a longer one is cut after a word."""
STOP_POLL_S = 0.005
"""How often an inference in flight looks at the stop event (a thread sets onnxruntime's terminate flag)."""
ARENA_SHRINKAGE = ("memory.enable_memory_arena_shrinkage", "cpu:0")
"""The run option that hands onnxruntime's CPU arena back after each inference: without it the arena keeps
the largest inference's memory for good (+2.8 GB after one 1,600-phoneme inference). Turning the arena off
instead costs ~50 % more CPU per inference (measured)."""
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

    def check(self, info: VoiceInfo, text: str) -> None:
        """Refuse (InvalidArgument), before anything opens, a text in a script this voice reads letter by
        letter (voice/spelled.py). Loads the voice."""
        voice = self.voice(info)
        refuse_spelled(lambda words: _phonemized(voice, words, info), info, readable(text))

    def speak(self, info: VoiceInfo, text: str, speed: float, stop: Cancel) -> Iterator[Any]:
        """int16 mono samples at info.sample_rate, a sentence (or a part of one, phoneme_chunks) at a time,
        the short first piece first; once `stop` is set the inference in flight is aborted and nothing more
        comes."""
        voice = self.voice(info)
        config = _synthesis_config(voice, speed)
        most = max(1, round(MAX_RENDER_PHONEMES * min(1.0, speed)))
        said = pieces(readable(text))  # Markdown, SSML and HTML marks are not read out
        for number, piece in enumerate(said, start=1):
            joins_next = number < len(said) and ends_mid_clause(piece)
            for sentence in _phonemized(voice, piece, info):
                chunks = phoneme_chunks(sentence, most)
                for index, chunk in enumerate(chunks, start=1):
                    samples = None if stop.is_set() else _rendered(voice, chunk, config, stop, info)
                    if samples is None:
                        return
                    mid_sentence = index < len(chunks)  # cut after a word: the next part follows on
                    yield trailing_silence_cut(samples, info.sample_rate) if joins_next or mid_sentence else samples


def phoneme_chunks(phonemes: list[str], most: int) -> list[list[str]]:
    """A sentence's phonemes in runs of at most `most`, each cut after the last word that ends in it (the
    " " phoneme), else at `most` (one spelled-out word can be longer); runs of spaces alone are dropped."""
    chunks: list[list[str]] = []
    start = 0
    while len(phonemes) - start > most:
        window = phonemes[start : start + most]
        ends = [i + 1 for i, phoneme in enumerate(window) if phoneme == " " and i > 0]
        cut = start + (ends[-1] if ends else most)
        chunks.append(phonemes[start:cut])
        start = cut
    chunks.append(phonemes[start:])
    return [chunk for chunk in chunks if any(phoneme != " " for phoneme in chunk)]


def _phonemized(voice: Any, text: str, info: VoiceInfo) -> list[list[str]]:
    """Piper's phonemes of `text`, a sentence a list. A config naming a phonemizer voice espeak does not have
    (or a phoneme type whose phonemizer fails) is voice_invalid naming the file, not an internal error."""
    try:
        return voice.phonemize(text)
    except Exception as exc:  # noqa: BLE001 - espeak's bridge raises RuntimeError, the others their own
        raise VoiceError(
            f"Piper could not turn text into phonemes with the voice {info.path}: {type(exc).__name__}; its "
            ".onnx.json names a phonemizer (espeak.voice, phoneme_type) that cannot be used here. Pull it again, "
            "or choose another voice (mcp-listen voices lists them).",
            code="voice_invalid",
        ) from None


def _rendered(voice: Any, phonemes: list[str], config: Any, stop: Cancel, info: VoiceInfo) -> Any:
    """One inference: int16 samples, peak-normalised as Piper's own synthesize() does; None when `stop`
    aborted it. A voice whose .onnx.json lies about its network (a phoneme id past the network's symbol
    table: onnxruntime refuses the lookup mid-speech) is voice_invalid naming the file, not an internal error."""
    import numpy as np

    options = import_onnxruntime().RunOptions()
    options.add_run_config_entry(*ARENA_SHRINKAGE)
    runner = dataclasses.replace(voice, session=_WithRunOptions(voice.session, options))
    ids = voice.phonemes_to_ids(phonemes)
    try:
        with _terminated_on(stop, options):
            audio = runner.phoneme_ids_to_audio(ids, config)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors have no public base class
        if stop.is_set():
            return None  # the stop aborted it: "Exiting due to terminate flag being set to true"
        raise VoiceError(
            f"Piper could not speak with the voice {info.path}: its network refused the input "
            f"({type(exc).__name__}); its .onnx.json does not match its .onnx. Pull it again, or choose another "
            "voice (mcp-listen voices lists them).",
            code="voice_invalid",
        ) from None
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    audio = audio / peak if peak >= 1e-8 else np.zeros_like(audio)
    return np.clip(audio * 32767.0, -32767.0, 32767.0).astype(np.int16)


class _WithRunOptions:
    """The voice's onnxruntime session run with these options: Piper's phoneme_ids_to_audio builds the
    network's inputs (the scales, the speaker) and calls `session.run(None, inputs)`, with no way to pass them."""

    def __init__(self, session: Any, options: Any) -> None:
        self._session = session
        self._options = options

    def run(self, output_names: Any, inputs: Any) -> Any:
        return self._session.run(output_names, inputs, self._options)


@contextmanager
def _terminated_on(stop: Cancel, options: Any) -> Iterator[None]:
    """While the block runs, a thread looks at `stop` every STOP_POLL_S and, once it is set, sets the
    inference's terminate flag: onnxruntime then ends the run within one operator (measured: at most ~30 ms
    of CPU in a MAX_RENDER_PHONEMES inference) instead of rendering on, unheard, for seconds."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(STOP_POLL_S):
            if stop.is_set():
                options.terminate = True
                return

    threading.Thread(target=watch, name="mcp-listen-synth-stop", daemon=True).start()
    try:
        yield
    finally:
        done.set()


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
