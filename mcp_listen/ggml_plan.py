"""What whisper.cpp (1.8.x) makes of a model header: the weight types, the geometry it accepts,
the tensors its loader creates, and the memory loading and running them takes.

Pure rules and arithmetic, no I/O: ggml.py walks a file against them. Kept apart so the
loader's expectations (which change with the whisper.cpp build) sit in one place, and the
memory need can be computed from a header without touching a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_listen.ggml import Model

QNT_VERSION_FACTOR = 1000  # ftype = quantisation version * 1000 + ftype proper
F32, F16 = 0, 1

# ggml type id -> (name, elements per block, bytes per block): the types this build runs
TYPES: dict[int, tuple[str, int, int]] = {
    0: ("f32", 1, 4),
    1: ("f16", 1, 2),
    2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),
    10: ("q2_K", 256, 84),
    11: ("q3_K", 256, 110),
    12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176),
    14: ("q6_K", 256, 210),
}

# header ftype -> ggml type of the big matrices (ggml_ftype_to_ggml_type). ftype 0 (all F32) is
# missing on purpose: whisper.cpp loads it, then aborts the process in its first convolution
# (GGML_ASSERT(src0->type == GGML_TYPE_F16)); measured with a real tiny.en converted to F32.
FTYPES: dict[int, int] = {1: 1, 2: 2, 3: 3, 7: 8, 8: 6, 9: 7, 10: 10, 11: 11, 12: 12, 13: 13, 14: 14}

# Geometry every released Whisper model has (tiny ... large-v3-turbo, .en and fine-tunes):
# token ids, the 30 s window (1500 audio frames) and the 448-token text context are fixed
# in whisper.cpp's code, so other values index past its buffers.
N_VOCABS = (51864, 51865, 51866)
N_AUDIO_CTX = 1500
N_TEXT_CTX = 448
N_MELS = (80, 128)
N_FFT_BINS = 201  # 1 + WHISPER_N_FFT / 2
MAX_STATE = 1 << 13
MAX_LAYERS = 64
MAX_HEADS = 64


@dataclass(frozen=True)
class HParams:
    n_vocab: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_mels: int
    ftype: int

    @property
    def wtype(self) -> int:
        """The ggml type of the big matrices, from the header's ftype."""
        return FTYPES[self.ftype % QNT_VERSION_FACTOR]


def expected_tensors(hp: HParams) -> dict[str, tuple[tuple[int, int, int], int]]:
    """Every tensor whisper.cpp creates: name -> (ggml shape (ne0, ne1, ne2), ggml type).

    Types as whisper_model_load gives them: biases, norms and positional embeddings F32,
    the two convolutions F16, every other matrix the header's weight type.
    """
    a, t, w = hp.n_audio_state, hp.n_text_state, hp.wtype
    shapes: dict[str, tuple[tuple[int, ...], int]] = {
        "encoder.positional_embedding": ((a, hp.n_audio_ctx), F32),
        "encoder.conv1.weight": ((3, hp.n_mels, a), F16),
        "encoder.conv1.bias": ((1, a), F32),
        "encoder.conv2.weight": ((3, a, a), F16),
        "encoder.conv2.bias": ((1, a), F32),
        "encoder.ln_post.weight": ((a,), F32),
        "encoder.ln_post.bias": ((a,), F32),
        "decoder.positional_embedding": ((t, hp.n_text_ctx), F32),
        "decoder.token_embedding.weight": ((t, hp.n_vocab), w),
        "decoder.ln.weight": ((t,), F32),
        "decoder.ln.bias": ((t,), F32),
    }
    for i in range(hp.n_audio_layer):
        shapes.update(_block_tensors(f"encoder.blocks.{i}", a, w, cross=False))
    for i in range(hp.n_text_layer):
        shapes.update(_block_tensors(f"decoder.blocks.{i}", t, w, cross=True))
    return {k: ((s + (1, 1, 1))[:3], ty) for k, (s, ty) in shapes.items()}  # type: ignore[misc]


def _block_tensors(prefix: str, d: int, w: int, *, cross: bool) -> dict[str, tuple[tuple[int, ...], int]]:
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    for norm in ["attn_ln", "mlp_ln"] + (["cross_attn_ln"] if cross else []):
        out[f"{prefix}.{norm}.weight"] = ((d,), F32)
        out[f"{prefix}.{norm}.bias"] = ((d,), F32)
    for attn in ["attn"] + (["cross_attn"] if cross else []):
        for proj in ("query", "key", "value", "out"):
            out[f"{prefix}.{attn}.{proj}.weight"] = ((d, d), w)
            if proj != "key":  # whisper has no key bias
                out[f"{prefix}.{attn}.{proj}.bias"] = ((d,), F32)
    out[f"{prefix}.mlp.0.weight"] = ((d, 4 * d), w)
    out[f"{prefix}.mlp.0.bias"] = ((4 * d,), F32)
    out[f"{prefix}.mlp.2.weight"] = ((4 * d, d), w)
    out[f"{prefix}.mlp.2.bias"] = ((d,), F32)
    return out


# --------------------------------------------------------------------------- memory

# Measured with this build (whisper.cpp 1.8.5 / ggml 0.13, CPU) on tiny.en and base: loading maps
# the weights, the caches and compute buffers whisper.cpp logs, a logits reserve of
# n_vocab * n_text_ctx floats, and ~360 MB of scheduler contexts it never touches; each
# transcription thread beyond the caller's adds ~85 MB of address space (stack + malloc arena).
SCHED_BYTES = 360_000_000
CALLER_THREAD_ADDRESS, THREAD_ADDRESS, THREAD_DATA = 15_000_000, 85_000_000, 9_000_000
MARGIN = 1.05
SLACK = 16_000_000


@dataclass(frozen=True)
class Needs:
    """Bytes whisper.cpp will need to load a model and transcribe with it."""

    resident: int
    """Touched memory: weights, caches, compute buffers (an upper bound: not all are touched)."""
    address: int
    """Address space mapped (what RLIMIT_AS counts), most of it never touched."""
    data: int
    """Private writable mappings (what RLIMIT_DATA counts)."""


def state_bytes(hp: HParams) -> int:
    """whisper_init_state's caches and compute buffers (its log lines), a little over."""
    pad = lambda n: -(-n // 256) * 256  # noqa: E731
    kv_self = 2 * hp.n_text_layer * hp.n_text_state * pad(hp.n_text_ctx) * 2
    kv_cross = 2 * hp.n_text_layer * hp.n_text_state * pad(hp.n_audio_ctx) * 2
    kv_pad = 2 * hp.n_audio_state * pad(hp.n_audio_ctx) * 2
    logits = hp.n_vocab * hp.n_text_ctx * 4
    compute = logits + 4_000_000 + hp.n_audio_ctx * hp.n_audio_state * 64 + hp.n_mels * 3000 * 16
    return kv_self + kv_cross + kv_pad + compute


def memory_needed(model: Model, threads: int) -> Needs:
    """What loading `model` and transcribing on `threads` threads will take (a slight over-estimate)."""
    hp = model.hparams
    resident = model.weight_bytes + state_bytes(hp)
    untouched = SCHED_BYTES + hp.n_vocab * hp.n_text_ctx * 4
    extra = max(0, threads - 1)
    address = resident + untouched + CALLER_THREAD_ADDRESS + extra * THREAD_ADDRESS
    data = resident + untouched + CALLER_THREAD_ADDRESS + extra * THREAD_DATA
    return Needs(*(int(n * MARGIN) + SLACK for n in (resident, address, data)))
