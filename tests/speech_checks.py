"""Checks on real speech shared by the end-to-end tests: clips, word error rate, calls made while a clip plays."""

from __future__ import annotations

import re
import time
from pathlib import Path

import anyio
import audio_assets as A
import numpy as np
from rpc import mcp_client, structured
from timing import machine_load

SAID = "purple giraffes are dancing in zanzibar tonight"
"""The sentence of the privacy tests: none of its words may reach a log."""


async def capture_while_playing(env, vmic, clip, args) -> dict:
    """Start capture_audio, play `clip` into the microphone once it listens, return the result."""
    async with mcp_client(env) as client:
        results = []

        async def capture():
            results.append(await client.call_tool("capture_audio", args))

        async with anyio.create_task_group() as tg:
            tg.start_soon(capture)
            await wait_until_recording(client)
            if clip is not None:
                await anyio.to_thread.run_sync(lambda: vmic.play(clip))
    assert not results[0].is_error, results[0].content[0].text
    return structured(results[0])


def without_trailing_silence(path) -> np.ndarray:
    """espeak ends a clip with ~280 ms of digital silence: a pause built after it would be longer."""
    samples = A.read_wav(path)
    return samples[: np.flatnonzero(samples)[-1] + 1]


def speech_clip() -> Path:
    return A.concat(
        [A.silence(200), A.speech("please tell me a short story about a lighthouse keeper"), A.silence(400)]
    )


def heard_lighthouse(transcription: str | None) -> bool:
    """Whether speech_clip's key word was heard. Compared without spaces and hyphens: tiny.en also writes
    the same sounds as "a light housekeeper" or "a light-housekeeper" (seen in live servers, where the
    phrase cuts fall)."""
    return "lighthouse" in (transcription or "").lower().replace(" ", "").replace("-", "")


def said_clip() -> Path:
    return A.concat([A.silence(300), A.speech(SAID), A.silence(1500)])


async def wait_until_recording(client, timeout: float = 10.0) -> None:
    """Poll get_status (never blocked by the recording lock) until the microphone is capturing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = (await client.call_tool("get_status", {})).structured_content
        if status["recording"] and status["device"]:
            await anyio.sleep(0.1)
            return
        await anyio.sleep(0.02)
    raise TimeoutError(f"the recording never started within {timeout:g} s ({machine_load()})")


QUESTION = "What is the capital city of France?"


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


def edits(ref: list[str], hyp: list[str]) -> int:
    """Word-level edit distance (substitutions, insertions, deletions); bench/clips.py counts with it too."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def wer(reference: str, hypothesis: str) -> float:
    ref = words(reference)
    return edits(ref, words(hypothesis)) / max(1, len(ref))


def spoken(text: str, tail_ms: int = 2500) -> Path:
    return A.concat([A.silence(300), A.speech(text), A.silence(tail_ms)])


async def call_while_playing(client, vmic, tool: str, args: dict, clip: Path | None, **kw):
    results = []

    async def call():
        results.append(await client.call_tool(tool, args, **kw))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await wait_until_recording(client)
        if clip is not None:
            await anyio.to_thread.run_sync(lambda: vmic.play(clip))
    return results[0]
