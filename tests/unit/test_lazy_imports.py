"""Heavy libraries load on first use only: the server answers `initialize` as fast as a bare one.

Each module is imported in a fresh interpreter, which then reports which heavy
modules came along. Importing any of ours must pull in none of them.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("numpy", "onnxruntime", "sounddevice", "_pywhispercpp", "pywhispercpp", "ollama", "httpx", "soxr")
PACKAGE = Path(__file__).resolve().parents[2] / "mcp_listen"
MODULES = (
    "mcp_listen",
    *sorted(
        info.name
        for info in pkgutil.walk_packages([str(PACKAGE)], prefix="mcp_listen.")
        if not info.name.endswith(("__main__", "probe_child"))  # scripts, run as programs
    ),
)
"""Every module of the package, found on disk: a new module is covered without editing this list."""


def test_the_module_list_is_found():
    assert {"mcp_listen.server.app", "mcp_listen.audio.microphone", "mcp_listen.ollama.http"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_importing_loads_no_heavy_library(module):
    code = f"import sys, {module}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"{module} imports {done.stdout.strip()} at import time"


def test_only_the_server_package_imports_mcp():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES if not m.startswith("mcp_listen.server"))
        + "print('mcp' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
