"""Model files built from the real tiny.en for the model-file tests: re-typed, re-headed, sparse.

A walker of its own (not mcp_listen.whisper.ggml), so a bug in the code under test cannot also shape its inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HPARAM_NAMES = (
    "n_vocab n_audio_ctx n_audio_state n_audio_head n_audio_layer "
    "n_text_ctx n_text_state n_text_head n_text_layer n_mels ftype"
).split()


@dataclass
class Tensor:
    name: str
    dims: tuple[int, ...]
    ttype: int
    data: bytes


def split(model: Path) -> tuple[dict[str, int], bytes, list[Tensor]]:
    """(hparams, the bytes between hparams and tensors (mel filters + vocabulary), tensors)."""
    raw = model.read_bytes()
    assert raw[:4] == b"lmgg"
    hp = dict(zip(HPARAM_NAMES, struct.unpack_from("<11i", raw, 4)))
    pos = 48
    n_mel, n_fft = struct.unpack_from("<2i", raw, pos)
    pos += 8 + n_mel * n_fft * 4
    (count,) = struct.unpack_from("<i", raw, pos)
    pos += 4
    for _ in range(count):
        (length,) = struct.unpack_from("<i", raw, pos)
        pos += 4 + length
    middle = raw[48:pos]
    return hp, middle, list(_tensors(raw, pos))


def _tensors(raw: bytes, pos: int) -> Iterator[Tensor]:
    sizes = {0: 4, 1: 2}
    while pos + 12 <= len(raw):
        n_dims, name_len, ttype = struct.unpack_from("<3i", raw, pos)
        pos += 12
        dims = struct.unpack_from(f"<{n_dims}i", raw, pos)
        pos += 4 * n_dims
        name = raw[pos : pos + name_len].decode()
        pos += name_len
        nbytes = int(np.prod(dims)) * sizes[ttype]
        yield Tensor(name, tuple(dims), ttype, raw[pos : pos + nbytes])
        pos += nbytes


def header(hp: dict[str, int]) -> bytes:
    return b"lmgg" + struct.pack("<11i", *(hp[k] for k in HPARAM_NAMES))


def tensor_header(t: Tensor) -> bytes:
    name = t.name.encode()
    return struct.pack(f"<3i{len(t.dims)}i", len(t.dims), len(name), t.ttype, *t.dims) + name


def write(out: Path, hp: dict[str, int], middle: bytes, tensors: list[Tensor]) -> Path:
    with open(out, "wb") as f:
        f.write(header(hp) + middle)
        for t in tensors:
            f.write(tensor_header(t) + t.data)
    return out


def retyped(model: Path, out: Path, ftype: int, convert: Callable[[Tensor], Tensor]) -> Path:
    hp, middle, tensors = split(model)
    hp["ftype"] = ftype
    return write(out, hp, middle, [convert(t) for t in tensors])


def to_f32(t: Tensor) -> Tensor:
    if t.ttype != 1:
        return t
    data = np.frombuffer(t.data, dtype="<f2").astype("<f4").tobytes()
    return Tensor(t.name, t.dims, 0, data)


def all_f32(model: Path, out: Path) -> Path:
    """The real model with every F16 tensor widened to F32 and the header saying so (ftype 0)."""
    return retyped(model, out, 0, to_f32)


def sparse_giant(model: Path, out: Path, state: int = 4096, layers: int = 64) -> tuple[Path, int]:
    """A sparse file with tiny.en's mel filters and vocabulary, whose header asks for a model of
    width `state` and `layers` encoder + decoder layers: every tensor header is written, every
    tensor's data is a hole. Returns the path and the tensor bytes the header claims."""
    hp, middle, tensors = split(model)
    hp.update(n_audio_state=state, n_text_state=state, n_audio_layer=layers, n_text_layer=layers)
    hp.update(n_audio_head=state // 64, n_text_head=state // 64)
    claimed = 0
    with open(out, "wb") as f:
        f.write(header(hp) + middle)
        for name, dims, ttype in _giant_tensors(hp):
            f.write(tensor_header(Tensor(name, dims, ttype, b"")))
            nbytes = int(np.prod(dims, dtype=np.int64)) * (4 if ttype == 0 else 2)
            f.seek(nbytes, 1)
            claimed += nbytes
        f.truncate()
    return out, claimed


def _giant_tensors(hp: dict[str, int]) -> Iterator[tuple[str, tuple[int, ...], int]]:
    """The tensors of a whisper model with these hparams, types as whisper.cpp wants them for F16."""
    d, mels = hp["n_audio_state"], hp["n_mels"]
    yield "encoder.positional_embedding", (d, hp["n_audio_ctx"]), 0
    yield "encoder.conv1.weight", (3, mels, d), 1
    yield "encoder.conv1.bias", (1, d), 0
    yield "encoder.conv2.weight", (3, d, d), 1
    yield "encoder.conv2.bias", (1, d), 0
    yield "encoder.ln_post.weight", (d,), 0
    yield "encoder.ln_post.bias", (d,), 0
    yield "decoder.positional_embedding", (d, hp["n_text_ctx"]), 0
    yield "decoder.token_embedding.weight", (d, hp["n_vocab"]), 1
    yield "decoder.ln.weight", (d,), 0
    yield "decoder.ln.bias", (d,), 0
    for side, n in (("encoder", hp["n_audio_layer"]), ("decoder", hp["n_text_layer"])):
        for i in range(n):
            yield from _block(f"{side}.blocks.{i}", d, cross=side == "decoder")


def _block(prefix: str, d: int, *, cross: bool) -> Iterator[tuple[str, tuple[int, ...], int]]:
    for norm in ["attn_ln", "mlp_ln"] + (["cross_attn_ln"] if cross else []):
        yield f"{prefix}.{norm}.weight", (d,), 0
        yield f"{prefix}.{norm}.bias", (d,), 0
    for attn in ["attn"] + (["cross_attn"] if cross else []):
        for proj in ("query", "key", "value", "out"):
            yield f"{prefix}.{attn}.{proj}.weight", (d, d), 1
            if proj != "key":
                yield f"{prefix}.{attn}.{proj}.bias", (d,), 0
    yield f"{prefix}.mlp.0.weight", (d, 4 * d), 1
    yield f"{prefix}.mlp.0.bias", (4 * d,), 0
    yield f"{prefix}.mlp.2.weight", (4 * d, d), 1
    yield f"{prefix}.mlp.2.bias", (d,), 0


QUANTIZE_SKIP = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}


def to_q8_0(t: Tensor) -> Tensor:
    """What whisper.cpp's quantize tool does for q8_0: every 2-D tensor but four, in blocks of 32
    values (an f16 scale, then 32 int8); the others stay as they are."""
    if len(t.dims) != 2 or t.name in QUANTIZE_SKIP:
        return t
    x = np.frombuffer(t.data, dtype="<f2").astype(np.float32).reshape(-1, 32)
    scale = np.abs(x).max(axis=1, keepdims=True) / 127.0
    q = np.round(np.divide(x, scale, out=np.zeros_like(x), where=scale > 0)).clip(-127, 127).astype(np.int8)
    blocks = np.empty(len(x), dtype=[("d", "<f2"), ("q", "i1", 32)])
    blocks["d"], blocks["q"] = scale[:, 0].astype("<f2"), q
    return Tensor(t.name, t.dims, 8, blocks.tobytes())


def q8_0(model: Path, out: Path) -> Path:
    """The real model quantized to q8_0, header ftype 2007 (quantization version 2, Q8_0)."""
    return retyped(model, out, 2007, to_q8_0)
