"""The whisper.cpp model file (GGML), read the way this whisper.cpp build (1.8.x) reads it.

Pure: reads from a file object it is given, imports nothing heavy, knows nothing of MCP.

Why it is this strict: whisper.cpp checks little and fails hard. A truncated or foreign file
loads into a null context that segfaults at the first transcription; a file it accepts but
cannot run aborts the whole process with a GGML_ASSERT (an all-F32 model at the first
convolution, a header that asks for 67 GB at allocation). So a file passes only if every
header field has a real Whisper value, every tensor whisper.cpp will create is present once
with the shape *and type* its loader (whisper_model_load) gives that tensor name, and every
tensor's data lies inside the file. What the loader expects of a header (types, geometry, the
tensor table) and what loading costs (`memory_needed`) live in ggml_plan.py.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from mcp_listen.ggml_plan import (
    F32,
    FTYPES,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_STATE,
    N_AUDIO_CTX,
    N_FFT_BINS,
    N_MELS,
    N_TEXT_CTX,
    N_VOCABS,
    QNT_VERSION_FACTOR,
    TYPES,
    HParams,
    expected_tensors,
)

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
