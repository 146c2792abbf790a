"""The end-of-turn set: real recorded speech with a thinking pause mid-sentence, or a finished sentence.

    python bench/turn_set.py [--align all|widen] [--out DIR]

`--align` chooses the cuts again (whisper base's word timestamps, tests/assets/ggml-base.bin; `widen`:
batch 2 only) and rewrites bench/turn_set.json; without it the WAVs are rebuilt from that file alone. The
set, its two batches and their rules: bench/README.md ("End of turn").
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np
import realspeech_data as R
from rig import audio_assets

SET_FILE = Path(__file__).resolve().parent / "turn_set.json"
PAUSES_MS = (1200, 1500, 1800, 2100, 2500)
PAUSE_WORDS = {  # the words a thinking pause follows, per language; digits and number words: a list
    "en": "and but because so or the a an to of with that think see for your",
    "es": "y pero porque o el la los las un una a de del con que para por su",
    "fr": "et mais ou le la les un une à de du des avec que pour par sur votre",
}
WIDEN = {"en": "and but because so with that um uh think see", "es": "y pero porque con que",
         "fr": "et mais parce avec que", "it": "e ma perché quindi con che o il la un una a di per"}  # fmt: skip
"""Batch 2's words: the issue's list ("I think", "let me see": their last word), in es and fr those batch 1
has no cut after, in Italian (a new voice) all of them and a digit."""
NUMBERS = re.compile(r"^(\d+|one|two|three|four|five|six|seven|eight|nine|uno|dos|tres|cuatro|cinco|seis|siete|"
                     r"ocho|nueve|un|deux|trois|quatre|cinq|sept|huit|neuf)$")  # fmt: skip
VOICES = {"en": "en_US_f_Allison", "es": "es_MX_f_Allison", "fr": "fr_CA_f_June", "it": "it_IT_m_Carlo"}
"""The Asterisk prompts' folder per language: Allison Smith (en, es), June Wallack (fr), Carlo Flora (it)."""
PER_LANGUAGE = {"en": (14, 12), "es": (6, 5), "fr": (6, 5)}  # batch 1's (thinking, finished) utterances


def prompts() -> list[tuple[str, str, str]]:
    """(language, prompt name, reference text): every Asterisk prompt of 60-400 characters that is not a
    fragment (no "..." and no lower-case start)."""
    out = []
    for lang in VOICES:
        member = f"./usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
        raw = R.members(R.fetch(f"ast-{lang}", R.DEFAULT_CACHE / "downloads"), {member})[member]
        for line in gzip.decompress(raw).decode("utf-8", "replace").splitlines():
            name, _, text = line.partition(":")
            text = text.strip()
            if 60 <= len(text) <= 400 and "..." not in text and "…" not in text and text[:1].isupper():
                out.append((lang, name.strip(), text))
    return out


def clips() -> dict[tuple[str, str], dict]:
    """realspeech_data's LibriVox, JFK and CMU clips (not its Asterisk ones), by (language, "clip:id")."""
    return {(c["language"], f"clip:{c['id']}"): c for c in R.load() if not c["id"].startswith("ast-")}


def recordings(chosen: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], np.ndarray]:
    """16 kHz samples of the prompts (all, or the `chosen` (language, name) pairs; "clip:" names: clips())."""
    wanted = {(lang, name) for lang, name, _ in prompts()} if chosen is None else chosen
    out = {k: audio_assets.read_wav(c["path"]) for k, c in clips().items() if k in wanted} if chosen else {}
    for lang in VOICES:
        names = {f"./usr/share/asterisk/sounds/{VOICES[lang]}/{name}.wav": name for lg, name in wanted
                 if lg == lang and name[:5] != "clip:"}  # fmt: skip
        files = R.members(R.fetch(f"ast-{lang}-wav", R.DEFAULT_CACHE / "downloads"), set(names)) if names else {}
        for member, raw in files.items():
            path = R.DEFAULT_CACHE / "turns" / f"{lang}-{names[member].replace('/', '-')}.wav"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                R.convert(raw, member, path)
            out[(lang, names[member])] = audio_assets.read_wav(path)
    return out


def gaps(samples: np.ndarray, least: int = 3) -> list[tuple[int, int]]:
    """Quiet runs of >= `least` 10 ms windows inside the speech: (first, end)."""
    env = np.abs(samples[: len(samples) // 160 * 160].astype(np.float64)).reshape(-1, 160).mean(axis=1)
    loud = np.flatnonzero(env >= 0.1 * env.max())
    marks = "".join("q" if q else " " for q in env[loud[0] : loud[-1] + 1] < 0.1 * env.max())
    return [(int(loud[0]) + m.start(), int(loud[0]) + m.end()) for m in re.finditer(f"q{{{least},}}", marks)]


def words(model, samples: np.ndarray, lang: str) -> list[tuple[str, int]]:
    """(word, end in 10 ms windows) by whisper's token timestamps, one word a segment."""
    segs = model.transcribe(samples.astype(np.float32) / 32768, language=lang, token_timestamps=True, max_len=1,
                            split_on_word=True, print_progress=False,
                            audio_ctx=min(1500, len(samples) * 50 // 16000 + 64))  # fmt: skip  # the encoder on the clip only
    return [(s.text.strip(), int(s.t1)) for s in segs if s.text.strip()]


def cuts(spoken: list, samples: np.ndarray, lang: str, reference: str, least: int = 3, vocab: str = "") -> list:
    """(word, sample at the middle of the gap after it, the words before, gap ms) for each pause word
    (`vocab`, else PAUSE_WORDS or a number) that a gap of >= `least` windows follows within 150 ms and the
    reference transcript has, with >= 1 s of speech before and 0.5 s after; `spoken`: words()."""
    runs, out, pause = gaps(samples, least), [], (vocab or PAUSE_WORDS[lang]).split()
    said = set(re.sub(r"[^\w' ]", " ", reference.lower()).split())
    for i, (word, end) in enumerate(spoken[:-1]):
        bare = re.sub(r"[^\w']", "", word.lower())
        number = NUMBERS.match(bare) and (not vocab or lang == "it" and bare.isdigit())
        if bare not in said or bare not in pause and not number or word[-1] in ".,;:?!":
            continue
        near = [g for g in runs if g[1] >= end - 15 and g[0] <= end + 15]
        if near and 100 <= (g := near[0])[0] and g[1] * 160 <= len(samples) - 8000:
            out.append((bare, (g[0] + g[1]) // 2 * 160, " ".join(w for w, _ in spoken[: i + 1]), 10 * (g[1] - g[0])))
    return out


def pick(model, lang: str, names: list[str], texts: dict, audio: dict, quota: int, vocab: str = "") -> list[dict]:
    """Thinking cuts in `names`' order until `quota`, one a recording, up to 2 after each pause word (a number:
    "number"). With `vocab` (batch 2) only its words (in Italian a digit too), a real gap in any recording
    first, then a short one; whisper (the slow part) only where the transcript has a word still wanted."""
    used, heard, out = {w: 0 for w in vocab.split() + ["number"] * (lang == "it")}, {}, []
    for least in (3, 1) if vocab else (3,):
        for name in names:
            said = {"number" if w.isdigit() else w for w in re.sub(r"[^\w' ]", " ", texts[(lang, name)].lower()).split()}  # fmt: skip
            if len(out) >= quota or name in {e["prompt"] for e in out} or vocab and min(used.get(w, 2) for w in said) > 1:  # fmt: skip
                continue
            heard[name], samples = heard.get(name) or words(model, audio[(lang, name)], lang), audio[(lang, name)]
            for word, at, before, gap in cuts(heard[name], samples, lang, texts[(lang, name)], least, vocab):
                key = "number" if (word.isdigit() if vocab else NUMBERS.match(word)) else word
                if used.get(key, 2 if vocab else 0) < 2:
                    used[key] = used.get(key, 0) + 1
                    out.append({"kind": "thinking", "lang": lang, "prompt": name, "cut": at, "word": word,
                                "said": before, **({"gap_ms": gap, "batch": 2} if vocab else {})})  # fmt: skip
                    print(lang, name, word, gap, before[-50:], file=sys.stderr, flush=True)
                    break
    return out


def align(model_path: Path, first: list[dict] | None = None) -> list[dict]:
    """Choose the set: batch 1 (unless `first` gives it), PER_LANGUAGE; then batch 2, WIDEN, with as many
    finished turns per language from recordings the set does not use yet, new voices first."""
    from pywhispercpp.model import Model

    model = Model(str(model_path), n_threads=2, print_progress=False, print_realtime=False)
    texts = {k: c["text"] for k, c in clips().items()} | {(lang, n): text for lang, n, text in prompts()}
    audio, entries = recordings(set(texts)), first or []

    def finished(lang: str, whole: list[str], n: int, **extra: int) -> list[dict]:  # the first n, then one n on
        return [{"kind": "finished", "lang": lang, "prompt": name, "then": whole[(j + n) % len(whole)],
                 "said": texts[(lang, name)], **extra} for j, name in enumerate(whole[:n])]  # fmt: skip

    for lang, (n_thinking, n_finished) in PER_LANGUAGE.items() if first is None else ():
        names = sorted(n for lg, n in texts if lg == lang and (lg, n) in audio and n[:5] != "clip:")
        thinking = pick(model, lang, names, texts, audio, n_thinking)
        whole = [n for n in names if re.search(r"[.?!]$", texts[(lang, n)]) and all(e["prompt"] != n for e in thinking)]
        entries += thinking + finished(lang, whole, n_finished)
    for lang, vocab in WIDEN.items():  # batch 1's finished recordings may be cut; finished: one not in the set
        taken = {e["prompt"] for e in entries if e["kind"] == "thinking"}
        names = sorted((n for lg, n in texts if lg == lang and n not in taken), key=lambda n: n[:5] != "clip:")
        thinking = pick(model, lang, names, texts, audio, 99, vocab)
        whole = [n for n in names if all(n not in (e["prompt"], e.get("then")) for e in entries + thinking)
                 and (n[:5] == "clip:" or re.search(r"[.?!]$", texts[(lang, n)]))]  # fmt: skip
        whole = [n for i, n in enumerate(whole) if texts[(lang, n)] not in {texts[(lang, m)] for m in whole[:i]}]
        entries += thinking + finished(lang, whole, len(thinking), batch=2)
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
    audio = recordings({(e["lang"], e[k]) for e in entries for k in ("prompt", "then") if k in e})
    out = []
    for i, e in enumerate(entries):
        first = audio[(e["lang"], e["prompt"])]
        before, after = (first[: e["cut"]], first[e["cut"] :]) if "cut" in e else (first, audio[(e["lang"], e["then"])])
        pause = floor_noise(first, e["pause_ms"], seed=i)
        out.append({**e, "samples": np.concatenate([before, pause, after]), "pause_at": len(before), "resumes": len(before) + len(pause)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    opts = R.cli(__doc__, argv, ("--align", "", "all: choose the cuts again with whisper; widen: batch 2 only"),
                 ("--model", R.ROOT / "tests/assets/ggml-base.bin", "whisper"), ("--out", None, "WAVs here"))  # fmt: skip
    if opts.align:
        batch1 = [e for e in json.loads(SET_FILE.read_text())["turns"] if "batch" not in e]
        turns = align(opts.model, None if opts.align == "all" else batch1)
        SET_FILE.write_text(json.dumps({"note": __doc__.split("\n")[0], "turns": turns}, indent=1, ensure_ascii=False) + "\n")  # fmt: skip
    for e in build():
        print(f"{e['id']:20} {e['pause_ms']:5} {e.get('word', ''):8} {e['said'][-60:]}")
        if opts.out:
            opts.out.mkdir(parents=True, exist_ok=True)
            audio_assets.write_wav(e["samples"], opts.out / f"{e['id']}.wav")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
