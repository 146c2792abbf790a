"""The whisper.cpp model file (GGML), read the way this whisper.cpp build (1.8.x) reads it.

Pure: reads from a file object it is given, imports nothing heavy, knows nothing of MCP.

Why it is this strict: whisper.cpp checks little and fails hard. A truncated or foreign file
loads into a null context that segfaults at the first transcription; a file it accepts but
cannot run aborts the whole process with a GGML_ASSERT (an all-F32 model at the first
convolution, a header that asks for 67 GB at allocation). So a file passes only if every
header field has a real Whisper value, every tensor whisper.cpp will create is present once
with the shape *and type* its loader (whisper_model_load) gives that tensor name, and every
tensor's data lies inside the file.

First what the loader expects of a header (weight types, the geometry it accepts, the tensors
it creates) and the memory loading and running them takes (`memory_needed`, computed from a
header without touching a file); then the walk of a file against those rules.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

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


# ------------------------------------------------------------------ the file walk

MAGIC = b"lmgg"  # uint32 0x67676d6c written little-endian


class Invalid(Exception):
    """The file is not one this whisper.cpp build can load and run; args[0] says why."""


@dataclass(frozen=True)
class Model:
    """What the walk learned: the header and the bytes of tensor data whisper.cpp will allocate."""

    hparams: HParams
    weight_bytes: int
    tensor_count: int


def read_model(f: BinaryIO, size: int) -> Model:
    """Walk the whole file (headers read, tensor data skipped by seeking); raise Invalid on any flaw."""
    magic = f.read(4)
    if len(magic) < 4:
        raise Invalid("truncated or empty")
    if magic != MAGIC:
        raise Invalid(_foreign_format(magic + f.read(12)))
    hp = HParams(*_read(f, "<11i"))
    check_hparams(hp)
    n_mel, n_fft = _read(f, "<2i")
    if (n_mel, n_fft) != (hp.n_mels, N_FFT_BINS):
        raise Invalid("not a whisper.cpp model (bad mel filter header)")
    f.seek(n_mel * n_fft * 4, os.SEEK_CUR)
    _skip_vocab(f, hp.n_vocab)
    expected = expected_tensors(hp)
    weight_bytes = _walk_tensors(f, size, expected)
    return Model(hp, weight_bytes, len(expected))


def _read(f: BinaryIO, fmt: str) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise Invalid("truncated or empty")
    return struct.unpack(fmt, data)


def _foreign_format(head: bytes) -> str:
    if head.startswith(b"GGUF"):
        return "not a whisper.cpp model (it is a GGUF file, e.g. an Ollama/llama.cpp model)"
    if head.lstrip()[:1] in (b"<", b"{"):
        return "not a whisper.cpp model (it is a text/HTML page, probably a failed download)"
    return "not a whisper.cpp model (wrong magic bytes)"


def check_hparams(hp: HParams) -> None:
    """Header values whisper.cpp can run: real Whisper geometry and a weight type this build has."""
    fixed = [
        ("n_vocab", hp.n_vocab in N_VOCABS),
        ("n_audio_ctx", hp.n_audio_ctx == N_AUDIO_CTX),
        ("n_text_ctx", hp.n_text_ctx == N_TEXT_CTX),
        ("n_mels", hp.n_mels in N_MELS),
        ("n_audio_state", 0 < hp.n_audio_state <= MAX_STATE and hp.n_audio_state == hp.n_text_state),
        ("n_audio_layer", 0 < hp.n_audio_layer <= MAX_LAYERS),
        ("n_text_layer", 0 < hp.n_text_layer <= MAX_LAYERS),
        ("n_audio_head", 0 < hp.n_audio_head <= MAX_HEADS and hp.n_audio_state % hp.n_audio_head == 0),
        ("n_text_head", 0 < hp.n_text_head <= MAX_HEADS and hp.n_text_state % hp.n_text_head == 0),
    ]
    for field_name, ok in fixed:
        if not ok:
            raise Invalid(f"not a whisper.cpp model (implausible {field_name})")
    ftype = hp.ftype % QNT_VERSION_FACTOR if hp.ftype >= 0 else -1
    if ftype == F32:
        raise Invalid(
            "an all-F32 model (ftype 0), which this whisper.cpp build cannot run; use the F16 or a quantized file"
        )
    if ftype not in FTYPES:
        raise Invalid(f"not a whisper.cpp model this build can run (ftype {hp.ftype})")
    name, block, _ = TYPES[hp.wtype]
    if hp.n_audio_state % block:
        raise Invalid(f"its {name} quantization needs rows of {block} values, this model's are {hp.n_audio_state}")


def _skip_vocab(f: BinaryIO, n_vocab: int) -> None:
    """Skip the length-prefixed tokens, parsing a buffer instead of 50k tiny reads."""
    (count,) = _read(f, "<i")
    if not 0 <= count <= n_vocab:
        raise Invalid("not a whisper.cpp model (bad vocabulary size)")
    buf, off = b"", 0
    for _ in range(count):
        if off + 4 > len(buf):
            buf, off = _refill(f, buf, off, 4)
        length = int.from_bytes(buf[off : off + 4], "little", signed=True)
        if not 0 <= length <= 1 << 16:
            raise Invalid("not a whisper.cpp model (bad vocabulary entry)")
        if off + 4 + length > len(buf):
            buf, off = _refill(f, buf, off, 4 + length)
        off += 4 + length
    f.seek(off - len(buf), os.SEEK_CUR)


def _refill(f: BinaryIO, buf: bytes, off: int, need: int) -> tuple[bytes, int]:
    more = f.read(max(1 << 20, need))
    buf = buf[off:] + more
    if len(buf) < need:
        raise Invalid("truncated in the vocabulary")
    return buf, 0


def _walk_tensors(f: BinaryIO, size: int, expected: dict[str, tuple[tuple[int, int, int], int]]) -> int:
    """Check every tensor header against `expected` and that its data fits; the total data bytes."""
    seen: set[str] = set()
    total = 0
    while True:
        head = f.read(12)
        if len(head) < 12:  # whisper.cpp stops at end of file, as here
            break
        n_dims, name_len, ttype = struct.unpack("<3i", head)
        if not (1 <= n_dims <= 3 and 0 < name_len <= 256):
            raise Invalid("corrupt tensor header")
        dims = _read(f, f"<{n_dims}i")
        name = f.read(name_len).decode("utf-8", "replace")
        nbytes = _check_tensor(name, dims, ttype, expected, seen)
        end = f.tell() + nbytes
        if end > size:
            raise Invalid("truncated")
        f.seek(end)
        total += nbytes
    if seen != set(expected):
        raise Invalid(f"truncated: {len(set(expected) - seen)} of {len(expected)} tensors are missing")
    return total


def _check_tensor(
    name: str, dims: tuple[int, ...], ttype: int, expected: dict[str, tuple[tuple[int, int, int], int]], seen: set[str]
) -> int:
    """The tensor's data size, if whisper.cpp wants a tensor of this name, shape and type once."""
    shape = (tuple(dims) + (1, 1, 1))[:3]
    if name not in expected or name in seen:
        raise Invalid(f"unexpected tensor {name!r}")
    want_shape, want_type = expected[name]
    if shape != want_shape:
        raise Invalid(f"tensor {name!r} has shape {list(shape)}, expected {list(want_shape)}")
    if ttype != want_type:
        got = TYPES[ttype][0] if ttype in TYPES else f"type {ttype}"
        raise Invalid(f"tensor {name!r} is {got}, this whisper.cpp build needs {TYPES[want_type][0]}")
    seen.add(name)
    return tensor_bytes(shape, ttype)


def tensor_bytes(shape: tuple[int, ...], ttype: int) -> int:
    _, block, block_bytes = TYPES[ttype]
    if any(d <= 0 for d in shape) or shape[0] % block:
        raise Invalid("corrupt tensor dimensions")
    return math.prod(shape) // block * block_bytes
