"""Heavy libraries load on first use only: the server answers `initialize` as fast as a bare one.

Each module is imported in a fresh interpreter, which then reports which heavy
modules came along. Importing any of ours must pull in none of them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "onnxruntime", "sounddevice", "_pywhispercpp", "pywhispercpp", "ollama", "httpx", "soxr")
MODULES = (
    "mcp_listen",
    "mcp_listen.cli",
    "mcp_listen.config",
    "mcp_listen.contracts",
    "mcp_listen.engine_parts",
    "mcp_listen.devices",
    "mcp_listen.doctor",
    "mcp_listen.endpoint",
    "mcp_listen.ledger",
    "mcp_listen.lifecycle",
    "mcp_listen.listening",
    "mcp_listen.llm",
    "mcp_listen.model_store",
    "mcp_listen.ollama_http",
    "mcp_listen.phrases",
    "mcp_listen.pipeline",
    "mcp_listen.recorder",
    "mcp_listen.recordings",
    "mcp_listen.results",
    "mcp_listen.server",
    "mcp_listen.stream_open",
    "mcp_listen.tool_calls",
    "mcp_listen.transcriber",
    "mcp_listen.vad",
    "mcp_listen.wavfile",
)


@pytest.mark.parametrize("module", MODULES)
def test_importing_loads_no_heavy_library(module):
    code = f"import sys, {module}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"{module} imports {done.stdout.strip()} at import time"


def test_only_the_server_module_imports_mcp():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES if m not in ("mcp_listen.server", "mcp_listen.lifecycle"))
        + "print('mcp' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
