"""Whisper model names: `base.en` <-> `ggml-base.en.bin`, and a name or path -> an existing file.

Pure path logic (no file is opened here): the model store lists and pulls by these names, the
checks in whisper/model_file.py / whisper/admission.py name the `models pull` remedy with them.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp_listen.contract.limits import DEFAULT_WHISPER_MODEL
from mcp_listen.errors import TranscriptionError, command


def short_name(name: str) -> str:
    """`/x/ggml-base.en.bin`, `ggml-base.en.bin` or `base.en` -> `base.en`: the name
    `mcp-listen models pull` takes, and the one remedies and model listings show."""
    base = Path(name).name
    base = base[:-4] if base.endswith(".bin") else base
    return base[5:] if base.startswith("ggml-") else base


SUGGESTED_MODEL = short_name(DEFAULT_WHISPER_MODEL)
"""The model a remedy suggests pulling (`base.en`): the contract's default whisper model."""


def _file_name(name: str) -> str:
    """`base.en` -> `ggml-base.en.bin`; names ending in .bin already are file names."""
    if name.endswith(".bin"):
        return name
    return f"{name}.bin" if name.startswith("ggml-") else f"ggml-{name}.bin"


def _looks_like_path(name: str) -> bool:
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return os.path.isabs(name) or name.startswith("~") or any(s in name for s in seps)


def resolve_model(name: str, search_dirs: list[Path]) -> Path:
    """Turn a model name or path into an existing path; never downloads anything.

    Looked up as the Node edition does, then more: an absolute or `~` path as is; a relative
    path under each model folder (WHISPER_MODEL_PATH first), then the working directory; a
    name (`base.en`, `ggml-base.en.bin`) in each model folder, then the working directory.
    """
    name = name.strip()
    if os.path.isabs(name) or name.startswith("~"):
        path = _expand(name)
        if _exists(path):
            return path
        raise TranscriptionError(
            f"Whisper model file {path} does not exist. Check the path, or download a standard model "
            f"with: {command('models', 'pull', short_name(path.name) or SUGGESTED_MODEL)}",
            code="model_not_found",
        )
    dirs = [_expand(str(d)) for d in search_dirs]
    relative = name if _looks_like_path(name) else _file_name(name)
    for folder in [*dirs, Path.cwd()]:
        candidate = folder / relative
        if _exists(candidate):
            return candidate
        if candidate.name != name and _exists(folder / name):
            return folder / name  # a bare file name as given (`my-model.bin` in the working directory)
    where = ", ".join(str(d) for d in [*dirs, "the working directory"])
    raise TranscriptionError(
        f'Whisper model "{name}" not found: looked for {relative} in {where}. '
        f"Download it with: {command('models', 'pull', short_name(relative))}",
        code="model_not_found",
    )


def _expand(name: str) -> Path:
    """`~/x` and `~user/x`; a user that does not exist is a named error, not a crash."""
    try:
        return Path(name).expanduser()
    except RuntimeError:
        user = name[1:].split("/", 1)[0].split(os.sep, 1)[0]
        raise TranscriptionError(
            f'Whisper model path {name!r} names the home folder of "{user}", but there is no such user. '
            "Give an absolute path or a path under your own home (~/...).",
            code="model_not_found",
        ) from None


def _exists(path: Path) -> bool:
    """Whether `path` exists; a folder we may not look into is a named error, not internal_error."""
    try:
        return path.exists()
    except OSError as exc:
        raise TranscriptionError(
            f"Cannot look for the whisper model at {path}: {exc.strerror or type(exc).__name__}. "
            "Check the folder's permissions, or put the model where this user can read it.",
            code="model_unreadable",
        ) from None
