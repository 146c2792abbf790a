"""Whether a whisper model fits in memory here: whisper.cpp aborts the process when it does not.

The need comes from ggml.memory_needed; the room from MemAvailable, the cgroup's memory.max,
RLIMIT_AS and RLIMIT_DATA. Models this process already holds (the registered `_instances`, the
resident Transcribers) count as free: loading another replaces them.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from mcp_listen.errors import TranscriptionError, command
from mcp_listen.whisper import ggml
from mcp_listen.whisper.model_file import ModelKey, _ModelFile
from mcp_listen.whisper.names import SUGGESTED_MODEL

_instances: weakref.WeakSet[Any] = weakref.WeakSet()
"""The live Transcribers (each registers itself): `threads`, `_key`, `_model`, `_needs` are read."""


def _check_memory(mf: _ModelFile, model: ggml.Model, threads: int) -> None:
    """Refuse a model whose load would fail for memory: whisper.cpp aborts the process then.

    What this process already holds for another model counts as free (loading replaces it).
    """
    held = _held_by_others(mf.key)
    if held is None:
        return  # this very model is resident: nothing new to allocate
    needs = ggml.memory_needed(model, threads)
    for label, need, room in _memory_rooms(needs):
        if need > room + getattr(held, _ROOM_KIND[label]):
            raise TranscriptionError(
                f"Whisper model {mf.path} needs about {need / 1e6:.0f} MB to load and run, but {label} "
                f"leaves {max(room, 0) / 1e6:.0f} MB. Free memory or raise the limit, or use a smaller "
                f"model (e.g. {command('models', 'pull', SUGGESTED_MODEL)}).",
                code="model_invalid",
            )


_ROOM_KIND = {
    "available memory (MemAvailable)": "resident",
    "the cgroup memory limit (memory.max)": "resident",
    "the address-space limit (RLIMIT_AS, ulimit -v)": "address",
    "the data limit (RLIMIT_DATA, ulimit -d)": "data",
}


def _is_resident(key: ModelKey) -> bool:
    return any(tr._key == key and tr._model is not None for tr in list(_instances))


def _held_by_others(key: ModelKey) -> ggml.Needs | None:
    """Memory resident models of this process hold (None if `key` itself is resident)."""
    total = ggml.Needs(0, 0, 0)
    for tr in list(_instances):
        if tr._key == key and tr._model is not None:
            return None
        if tr._needs is not None:
            total = ggml.Needs(*(a + b for a, b in zip(vars(total).values(), vars(tr._needs).values(), strict=False)))
    return total


def _memory_rooms(needs: ggml.Needs) -> list[tuple[str, int, int]]:
    """(what limits us, bytes needed against it, bytes it leaves) for each limit that applies."""
    labels = list(_ROOM_KIND)
    rooms = [
        (labels[0], needs.resident, _meminfo_available()),
        (labels[1], needs.resident, _cgroup_room()),
        (labels[2], needs.address, _rlimit_room("RLIMIT_AS", "VmSize")),
        (labels[3], needs.data, _rlimit_room("RLIMIT_DATA", "VmData")),
    ]
    return [(label, need, room) for label, need, room in rooms if room is not None]


def _proc_kb(path: str, field: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo_available() -> int | None:
    return _proc_kb("/proc/meminfo", "MemAvailable")


def _rlimit_room(limit_name: str, status_field: str) -> int | None:
    """Bytes left under a soft resource limit: the limit minus what this process maps already."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(getattr(resource, limit_name))
    used = _proc_kb("/proc/self/status", status_field)
    if soft == resource.RLIM_INFINITY or used is None:
        return None
    return soft - used


def _cgroup_room() -> int | None:
    """memory.max minus memory.current of this process's cgroup (v2), if one is set."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
        base = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((base / "memory.current").read_text())
    except (OSError, ValueError, StopIteration):
        return None
