"""The end-of-turn set: real recorded speech with a thinking pause mid-sentence, or a finished sentence.

    python bench/turn_set.py [--align] [--out DIR]

`--align` chooses the cuts again (whisper base's word timestamps, tests/assets/ggml-base.bin) and
rewrites bench/turn_set.json; without it the WAVs are rebuilt from that file alone, with no whisper.

- *thinking*: a recording cut in a real word gap (>= 30 ms of 10 ms windows under 10 % of the peak
  envelope, within 150 ms of the end of the word whisper places before it) right after a word people
  pause on (and, but, the, to, of, with, that, a number in a list, ... in the clip's language), then a
  pause of the recording's own noise floor, then the rest of the sentence.
- *finished*: a whole prompt that ends a sentence, the same pause, then an unrelated prompt.

Pauses cycle through 1.2-2.5 s. The clips are the Asterisk prompts (en, es, fr) and the LibriVox, JFK
and CMU recordings that bench/realspeech_data.py fetches (their pins, sha256 and licences).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import realspeech_data as R  # noqa: E402

SET_FILE = Path(__file__).resolve().parent / "turn_set.json"
PAUSES_MS = (1200, 1500, 1800, 2100, 2500)
PAUSE_WORDS = {  # the words a thinking pause follows, per language; digits and number words: a list
    "en": "and but because so or the a an to of with that think see for your",
    "es": "y pero porque o el la los las un una a de del con que para por su",
    "fr": "et mais ou le la les un une à de du des avec que pour par sur votre",
}
NUMBERS = re.compile(r"^(\d+|one|two|three|four|five|six|seven|eight|nine|uno|dos|tres|cuatro|cinco|seis|siete|"
                     r"ocho|nueve|un|deux|trois|quatre|cinq|sept|huit|neuf)$")  # fmt: skip
VOICES = {"en": "en_US_f_Allison", "es": "es_MX_f_Allison", "fr": "fr_CA_f_June"}
"""The Asterisk prompts' folder per language: Allison Smith (en, es), June Wallack (fr)."""
PER_LANGUAGE = {"en": (14, 12), "es": (6, 5), "fr": (6, 5)}
"""(thinking, finished) utterances per language."""


def prompts() -> list[tuple[str, str, str]]:
    """(language, prompt name, reference text): every Asterisk prompt of 60-400 characters that is not a
    fragment (no "..." and no lower-case start)."""
    out = []
    for lang in ("en", "es", "fr"):
        member = f"./usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
        raw = R.members(R.fetch(f"ast-{lang}", R.DEFAULT_CACHE / "downloads"), {member})[member]
        import gzip

        for line in gzip.decompress(raw).decode("utf-8", "replace").splitlines():
            name, _, text = line.partition(":")
            text = text.strip()
            if 60 <= len(text) <= 400 and "..." not in text and "…" not in text and text[:1].isupper():
                out.append((lang, name.strip(), text))
    return out


def recordings(chosen: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], np.ndarray]:
    """16 kHz samples of the prompts (all, or the `chosen` (language, name) pairs)."""
    wanted = {(lang, name) for lang, name, _ in prompts()} if chosen is None else chosen
    out = {}
    for lang in ("en", "es", "fr"):
        names = {f"./usr/share/asterisk/sounds/{VOICES[lang]}/{name}.wav": name for lg, name in wanted if lg == lang}
        files = R.members(R.fetch(f"ast-{lang}-wav", R.DEFAULT_CACHE / "downloads"), set(names)) if names else {}
        for member, raw in files.items():
            path = R.DEFAULT_CACHE / "turns" / f"{lang}-{names[member].replace('/', '-')}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                R.convert(raw, member, path)
            out[(lang, names[member])] = read(path)
    return out


def read(path: Path) -> np.ndarray:
    import wave

    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).copy()


def gaps(samples: np.ndarray) -> list[tuple[int, int]]:
    """Quiet runs inside the speech, in 10 ms windows: (first, end)."""
    env = np.abs(samples[: len(samples) // 160 * 160].astype(np.float64)).reshape(-1, 160).mean(axis=1)
    quiet = env < 0.1 * env.max()
    loud = np.flatnonzero(~quiet)
    runs, start = [], None
    for i in range(loud[0], loud[-1] + 1):
        if quiet[i] and start is None:
            start = i
        elif not quiet[i] and start is not None:
            if i - start >= 3:
                runs.append((start, i))
            start = None
    return runs


def words(model, samples: np.ndarray, lang: str) -> list[tuple[str, int]]:
    """(word, end in 10 ms windows) by whisper's token timestamps, one word a segment."""
    segs = model.transcribe(
        samples.astype(np.float32) / 32768,
        language=lang,
        token_timestamps=True,
        max_len=1,
        split_on_word=True,
        print_progress=False,
        audio_ctx=min(1500, len(samples) * 50 // 16000 + 64),
    )  # the encoder on the clip, not 30 s

    return [(s.text.strip(), int(s.t1)) for s in segs if s.text.strip()]


def cuts(model, samples: np.ndarray, lang: str, reference: str) -> list[tuple[str, int, str]]:
    """(word, sample at the middle of the gap after it, the words before) for each pause word that a
    real gap follows and the reference transcript has, with >= 1 s of speech before and 0.5 s after."""
    spoken, runs, out = words(model, samples, lang), gaps(samples), []
    said = set(re.sub(r"[^\w' ]", " ", reference.lower()).split())
    for i, (word, end) in enumerate(spoken[:-1]):
        bare = re.sub(r"[^\w']", "", word.lower())
        if (
            bare not in said
            or bare not in PAUSE_WORDS[lang].split()
            and not NUMBERS.match(bare)
            or word[-1] in ".,;:?!"
        ):
            continue
        near = [g for g in runs if g[1] >= end - 15 and g[0] <= end + 15]
        if near and 100 <= near[0][0] and near[0][1] * 160 <= len(samples) - 8000:
            mid = (near[0][0] + near[0][1]) // 2 * 160
            out.append((bare, mid, " ".join(w for w, _ in spoken[: i + 1])))
    return out


def align(model_path: Path) -> list[dict]:
    """Choose the set: thinking cuts spread over the pause words, finished prompts, per language."""
    from pywhispercpp.model import Model

    model = Model(str(model_path), n_threads=2, print_progress=False, print_realtime=False)
    texts = {(lang, name): text for lang, name, text in prompts()}
    audio = recordings()
    entries: list[dict] = []
    for lang, (n_thinking, n_finished) in PER_LANGUAGE.items():
        names = sorted(name for lg, name in texts if lg == lang and (lg, name) in audio)
        used: dict[str, int] = {}
        thinking: list[dict] = []
        for name in names:  # transcribed one by one until the quota is met: whisper is the slow part
            if len(thinking) >= n_thinking:
                break
            for word, at, before in cuts(model, audio[(lang, name)], lang, texts[(lang, name)]):
                key = "number" if NUMBERS.match(word) else word
                if used.get(key, 0) < 2:
                    used[key] = used.get(key, 0) + 1
                    thinking.append(
                        {"kind": "thinking", "lang": lang, "prompt": name, "cut": at, "word": word, "said": before}
                    )
                    print(lang, name, word, before[-50:], file=sys.stderr, flush=True)
                    break
        whole = [n for n in names if re.search(r"[.?!]$", texts[(lang, n)]) and all(e["prompt"] != n for e in thinking)]
        entries += thinking
        for j, name in enumerate(whole[:n_finished]):
            then = whole[(j + n_finished) % len(whole)]
            entries.append(
                {"kind": "finished", "lang": lang, "prompt": name, "then": then, "said": texts[(lang, name)]}
            )
    for i, e in enumerate(entries):
        e["id"], e["pause_ms"] = f"{e['kind']}-{e['lang']}-{i:02d}", PAUSES_MS[i % len(PAUSES_MS)]
    return entries


def floor_noise(samples: np.ndarray, ms: int, seed: int) -> np.ndarray:
    """`ms` of Gaussian noise at the RMS of the recording's quietest 100 ms (its own floor)."""
    frames = samples[: len(samples) // 1600 * 1600].astype(np.float64).reshape(-1, 1600)
    rms = float(np.sqrt((frames**2).mean(axis=1)).min())
    return np.clip(np.random.default_rng(seed).normal(0, max(rms, 1.0), 16 * ms), -32768, 32767).astype(np.int16)


def build(entries: list[dict] | None = None) -> list[dict]:
    """Each entry with `samples` (the utterance) and `pause_at` (the sample where the pause begins) and
    `resumes` (where speech comes back)."""
    entries = entries if entries is not None else json.loads(SET_FILE.read_text())["turns"]
    audio = recordings(
        {(e["lang"], e["prompt"]) for e in entries} | {(e["lang"], e["then"]) for e in entries if "then" in e}
    )
    out = []
    for i, e in enumerate(entries):
        first = audio[(e["lang"], e["prompt"])]
        before, after = (first[: e["cut"]], first[e["cut"] :]) if "cut" in e else (first, audio[(e["lang"], e["then"])])
        pause = floor_noise(first, e["pause_ms"], seed=i)
        out.append({**e, "samples": np.concatenate([before, pause, after]), "pause_at": len(before),
                    "resumes": len(before) + len(pause)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--align", action="store_true", help="choose the cuts again with whisper base")
    p.add_argument("--model", type=Path, default=R.ROOT / "tests/assets/ggml-base.bin")
    p.add_argument("--out", type=Path, help="write each utterance as a WAV here")
    opts = p.parse_args(argv)
    if opts.align:
        turns = align(opts.model)
        SET_FILE.write_text(
            json.dumps({"note": __doc__.split("\n")[0], "turns": turns}, indent=1, ensure_ascii=False) + "\n"
        )
    for e in build():
        print(f"{e['id']:20} {e['pause_ms']:5} {e.get('word', ''):8} {e['said'][-60:]}")
        if opts.out:
            import wave

            opts.out.mkdir(parents=True, exist_ok=True)
            with wave.open(str(opts.out / f"{e['id']}.wav"), "wb") as w:
                w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(e["samples"].tobytes())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
