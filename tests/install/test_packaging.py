"""The artefacts a user installs: registry metadata, the built sdist and wheel, and the wheel run
the three ways users run it (a fresh venv's console script, `pipx run`, `uvx`), from a temporary
folder with no path to the checkout.

The build-and-install tests are marked `slow` (minutes; they fetch dependencies from PyPI, which
CI can reach) and run in the default `pytest` run. One build is shared by the module, so its tests
stay on one parallel worker (the xdist group below).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import pytest
import rpc

from mcp_listen import __version__
from mcp_listen.config import load_settings

REPO = Path(__file__).resolve().parents[2]
SERVER_JSON = REPO / "server.json"
README = REPO / "README.md"
REGISTRY_NAME = "io.github.mcp-listen/mcp-listen"
LISTEN_COMMAND = "tools/dev listen"
TEST_COMMAND = "tools/dev test"
INSTALL_TIMEOUT = 900

pytestmark = pytest.mark.xdist_group("packaging")


# ----------------------------------------------------------------------------- registry metadata


def env_vars_read_by_settings() -> set[str]:
    """Every variable load_settings asks its environment for, found by asking it."""

    class Watching(dict):
        def __init__(self) -> None:
            super().__init__()
            self.asked: set[str] = set()

        def get(self, key: str, default: Any = None) -> Any:
            self.asked.add(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> Any:
            self.asked.add(key)
            return super().__getitem__(key)

    env = Watching()
    load_settings(env)
    return env.asked


def test_only_config_reads_the_environment():
    """server.json's list is only complete if nothing outside config.py reads variables."""
    pattern = re.compile(r"os\.environ|getenv\(")
    readers = [
        p.name for p in (REPO / "mcp_listen").glob("*.py") if pattern.search(p.read_text()) and p.name != "config.py"
    ]
    assert readers == []


def test_server_json_matches_the_package():
    server = json.loads(SERVER_JSON.read_text())
    assert server["$schema"].startswith("https://static.modelcontextprotocol.io/schemas/")
    assert server["name"] == REGISTRY_NAME
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", server["name"])
    assert 0 < len(server["description"]) <= 100  # the registry rejects longer descriptions
    assert server["version"] == __version__ == dist_version("mcp-listen")
    (package,) = server["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == "mcp-listen"
    assert package["version"] == __version__
    assert package["transport"] == {"type": "stdio"}


def test_server_json_lists_every_environment_variable():
    (package,) = json.loads(SERVER_JSON.read_text())["packages"]
    listed = {v["name"]: v for v in package["environmentVariables"]}
    read = env_vars_read_by_settings()
    assert len(read) >= 7
    assert set(listed) == read
    for var in listed.values():
        assert var["description"] and var["isRequired"] is False and var["isSecret"] is False


def test_readme_carries_the_registry_marker_and_the_ci_test_command():
    """ "From source" holds exactly two commands, listen and test; CI runs the test one, nothing else."""
    text = README.read_text()
    assert f"<!-- mcp-name: {REGISTRY_NAME} -->" in text
    section = text.split("\n### From source\n", 1)[1].split("\n#", 1)[0]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S)
    assert [line for block in blocks for line in block.splitlines() if line.strip()] == [LISTEN_COMMAND, TEST_COMMAND]
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    ci_commands = [line for line in ci if line and not line.startswith(("#", "set ", "cd "))]
    assert ci_commands == [f"exec {TEST_COMMAND}"]
    assert os.access(REPO / "tools" / "dev", os.X_OK)


def test_readme_documents_every_environment_variable():
    text = README.read_text()
    for name in env_vars_read_by_settings():
        assert f"`{name}`" in text, name


def test_version_comes_from_the_package_metadata():
    done = subprocess.run([sys.executable, "-m", "mcp_listen", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"mcp-listen {dist_version('mcp-listen')}"


# ----------------------------------------------------------------------------- build


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def dist(work: Path) -> dict[str, Path]:
    """One `python -m build` (sdist, then the wheel built from that sdist) for the module."""
    out = work / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT, cwd=work, env=clean_env(work),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("mcp_listen-*.whl")
    (sdist,) = out.glob("mcp_listen-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def clean_env(work: Path, **extra: str) -> dict[str, str]:
    """This environment minus everything that leads back to the checkout or the test venv, with
    HOME and every tool cache inside `work`, so nothing leaks in or out."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONSAFEPATH")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("MCP_LISTEN_", "PIPX_", "UV_"))}
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != scripts)
    home = work / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        PIP_CACHE_DIR=str(work / "pip-cache"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        PIPX_HOME=str(work / "pipx"),
        PIPX_BIN_DIR=str(work / "pipx-bin"),
        PIPX_MAN_DIR=str(work / "pipx-man"),
        UV_CACHE_DIR=str(work / "uv-cache"),
        UV_TOOL_DIR=str(work / "uv-tools"),
        UV_TOOL_BIN_DIR=str(work / "uv-bin"),
        UV_PYTHON_INSTALL_DIR=str(work / "uv-python"),
        UV_PYTHON_DOWNLOADS="never",
        UV_PYTHON=sys.executable,
        UV_NO_PROGRESS="1",
    )
    env.update(extra)
    return env


def run(cmd: list[str], work: Path, **extra: str) -> subprocess.CompletedProcess:
    cwd = work / "cwd"
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, cwd=cwd, env=clean_env(work, **extra),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_wheel_contents(dist):
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(info).decode()
        entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
        licenses = {n.split(".dist-info/licenses/", 1)[1]: wheel.read(n).decode(errors="replace")
                    for n in names if ".dist-info/licenses/" in n}  # fmt: skip
    sources = {f"mcp_listen/{p.name}" for p in (REPO / "mcp_listen").glob("*.py")}
    assert sources <= names, sources - names
    assert {
        "mcp_listen/models/silero_vad_16k.onnx",
        "mcp_listen/models/LICENSE",
        "mcp_listen/models/README.md",
    } <= names
    assert "Apache License" in licenses["LICENSE"] and "Version 2.0" in licenses["LICENSE"]
    assert "MIT" in licenses["models/LICENSE"]
    for name in names:
        assert not name.startswith(("tests/", "bench/", ".ci/")), name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name
        assert name.startswith(("mcp_listen/", "mcp_listen-")), name
    assert f"Version: {__version__}\n" in metadata
    assert "Requires-Python: >=3.10" in metadata
    assert f"mcp-name: {REGISTRY_NAME}" in metadata  # the README is the PyPI description the registry reads
    for dependency in (
        "mcp",
        "sounddevice",
        "numpy",
        "onnxruntime",
        "pywhispercpp",
        "pydantic",
        "anyio",
        "httpx",
        "certifi",
        "soxr",
        "tqdm",
    ):
        (line,) = re.findall(rf"^Requires-Dist: {dependency}[<>=].*$", metadata, flags=re.M)
        assert "<" in line and ">=" in line, line  # bounded: a new major version cannot break users
    assert "mcp-listen = mcp_listen.cli.main:main" in entry_points


@pytest.mark.slow
def test_sdist_contents(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "LICENSE", "server.json", "models/silero_vad_16k.onnx", "models/LICENSE",
            "models/README.md", "tools/derive_silero_16k.py"} <= names  # fmt: skip
    assert not any(n.startswith(("tests/", "bench/", ".ci/")) or "__pycache__" in n for n in names), names


@pytest.fixture(scope="module")
def installed(dist, work) -> Path:
    """A brand-new venv with the wheel (and its dependencies from PyPI) installed by pip."""
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], work)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", str(dist["wheel"])], work)
    return venv


@pytest.mark.slow
def test_installed_wheel_runs_without_the_checkout(installed, work):
    located = run([str(installed / "bin" / "python"), "-c", "import mcp_listen; print(mcp_listen.__file__)"], work)
    assert Path(located.stdout.strip()).is_relative_to(installed)
    done = run([str(installed / "bin" / "mcp-listen"), "--version"], work)
    assert done.stdout.strip() == f"mcp-listen {__version__}"


LOAD_THE_BUNDLED_MODEL = """
import hashlib, numpy as np
from mcp_listen.contract import limits
from mcp_listen.speech import vad
data = vad.read_model_bytes()
assert hashlib.sha256(data).hexdigest() == vad.MODEL_SHA256
silence = vad.SileroVAD().probability(np.zeros(limits.WINDOW_SAMPLES, dtype=np.int16))
print(vad.model_folder() / vad.MODEL_FILE, silence)
"""


@pytest.mark.slow
def test_installed_wheel_loads_its_own_silero_model(installed, work):
    """The model comes from inside the installed package (not the checkout's models/) and runs."""
    done = run([str(installed / "bin" / "python"), "-c", LOAD_THE_BUNDLED_MODEL], work)
    where, silence = done.stdout.split()
    assert Path(where).is_relative_to(installed) and Path(where).is_file(), where
    assert 0.0 <= float(silence) < 0.1


def test_the_checkout_finds_the_model_in_the_top_level_models_folder():
    """An editable checkout reads models/ beside mcp_listen/, the folder the repository keeps it in."""
    done = subprocess.run([sys.executable, "-c", LOAD_THE_BUNDLED_MODEL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    where, silence = done.stdout.split()
    assert Path(where) == REPO / "models" / "silero_vad_16k.onnx"
    assert 0.0 <= float(silence) < 0.1


@pytest.mark.slow
def test_installed_console_script_serves_mcp(installed, work, vmic, monkeypatch):
    """initialize + tools/list, then one recording that needs the packaged Silero model."""
    monkeypatch.setattr(rpc, "SERVER_CMD", [str(installed / "bin" / "mcp-listen")])
    env = clean_env(work, **vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(work / "recordings"))
    with rpc.RawServer(env) as server:
        reply = server.initialize()
        listed = server.call("tools/list", {})
        devices = server.call("tools/call", {"name": "list_audio_devices", "arguments": {}})
        capture = server.call(
            "tools/call", {"name": "capture_audio", "arguments": {"duration_ms": 600, "stop_on_silence": True}}
        )
    info = reply["result"]["serverInfo"]
    assert (info["name"], info["version"]) == ("mcp-listen", __version__)
    assert tuple(t["name"] for t in listed["result"]["tools"]) == rpc.LISTENING_TOOLS
    assert devices["result"]["structuredContent"]["devices"]
    result = capture["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["stopped_by"] == "ceiling"
    assert result["structuredContent"]["speech_detected"] is False


def users_env(work: Path, home: str) -> dict[str, str]:
    """clean_env with its own empty HOME and without PIPX_HOME: pipx's default layout, the one users have
    (`pipx run` keeps its venv in ~/.cache/pipx/<hash> since pipx 1.5)."""
    env = clean_env(work, HOME=str(work / home))
    (work / home).mkdir(exist_ok=True)
    for name in ("PIPX_HOME", "PIPX_BIN_DIR", "PIPX_MAN_DIR", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        env.pop(name, None)
    return env


def run_as_user(cmd: list[str], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    (work / "cwd").mkdir(exist_ok=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, cwd=work / "cwd", env=env,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def check_temporary_environment(launched: list[str], runner: str, wheel: Path, work: Path, env: dict) -> None:
    """Run from a runner's cache, mcp-listen names the runner in its remedies, never the cache (which the
    runner empties at will), and `config --runner local` refuses to point a client there."""
    again, install = {
        "pipx": (f"pipx run --spec {shlex.quote(str(wheel))} mcp-listen", f"pipx install {shlex.quote(str(wheel))}"),
        "uvx": (f"uvx --from {shlex.quote(str(wheel))} mcp-listen", f"uv tool install {shlex.quote(str(wheel))}"),
    }[runner]
    models = run_as_user([*launched, "models"], work, env)
    assert models.returncode == 69, models.stdout + models.stderr
    assert f"Fetch one: {again} models pull base.en" in models.stdout, models.stdout
    local = run_as_user([*launched, "config", "cursor", "--runner", "local"], work, env)
    assert local.returncode == 64 and local.stdout == "", local.stderr
    assert install in local.stderr and f"--runner {runner}" in local.stderr


@pytest.mark.slow
def test_pipx_run_the_wheel(dist, work):
    env = users_env(work, "pipx-user")
    pipx = [sys.executable, "-m", "pipx", "run", "--spec", str(dist["wheel"]), "mcp-listen"]
    done = run_as_user([*pipx, "--version"], work, env)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == f"mcp-listen {__version__}", done.stderr
    assert list((work / "pipx-user" / ".cache" / "pipx").glob("*/pipx_metadata.json")), "pipx's default layout"
    check_temporary_environment(pipx, "pipx", dist["wheel"], work, env)


@pytest.mark.slow
def test_uvx_from_the_wheel(dist, work):
    uvx = shutil.which("uvx", path=str(Path(sys.executable).parent)) or shutil.which("uvx")
    if uvx is None:
        pytest.fail("uvx is missing: install the test extra (pip install -e '.[test]')")
    done = run([uvx, "--from", str(dist["wheel"]), "mcp-listen", "--version"], work)
    assert done.stdout.strip().splitlines()[-1] == f"mcp-listen {__version__}"
    launched = [uvx, "--from", str(dist["wheel"]), "mcp-listen"]
    check_temporary_environment(launched, "uvx", dist["wheel"], work, users_env(work, "uv-user"))
