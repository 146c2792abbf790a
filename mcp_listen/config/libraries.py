"""The optional libraries: whether an extra is installed (found without importing it), and
onnxruntime imported only with its telemetry off."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)

ORT_TELEMETRY_VAR = "ORT_DISABLE_TELEMETRY"


def _disable_onnxruntime_telemetry() -> bool:
    """Set ORT_DISABLE_TELEMETRY=1 for this process and its children; True if it already was.

    Written, never read as a setting (so not in server.json): onnxruntime 1.32 reads it when it
    is imported, and it is the only switch that stops its telemetry (see import_onnxruntime).
    It lives here because this module is the one that touches the environment.
    """
    was_off = os.environ.get(ORT_TELEMETRY_VAR) == "1"
    os.environ[ORT_TELEMETRY_VAR] = "1"
    return was_off


def installed(module: str) -> bool:
    """Whether `module` (an optional extra's) can be imported, found without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def import_onnxruntime() -> Any:
    """Import onnxruntime with its telemetry off: the only way this package imports it (the VAD
    directly, the voice before Piper imports it).

    onnxruntime 1.32 (Linux) starts Microsoft's 1DS telemetry when the module is imported, not
    when a session is created: it writes a device id and an event database under
    ~/.cache/Microsoft/DeveloperTools/.onnxruntime/, a `.ses` file in the temp folder, and looks
    up mobile.events.data.microsoft.com every few seconds. `disable_telemetry_events()` alone
    stops none of that (measured); only ORT_DISABLE_TELEMETRY set in the environment before the
    import does. We force it ("audio and words never leave the machine" admits no opt-in here)
    and still call disable_telemetry_events() for builds that honour only that.
    """
    imported_before = "onnxruntime" in sys.modules
    if not _disable_onnxruntime_telemetry() and imported_before:
        log.warning("onnxruntime was imported before mcp-listen could turn its telemetry off")
    import onnxruntime

    onnxruntime.disable_telemetry_events()
    return onnxruntime
