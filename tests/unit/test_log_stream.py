"""The log reaches stderr even while PortAudio hides its own noise.

sounddevice's `_initialize` (at its import, and at each device re-scan) points fd 2 at /dev/null
while PortAudio starts, so that ALSA's complaints are not shown. A line another thread logs in
that moment went to /dev/null too: on a loaded machine the server's last word before exiting
(its client had closed our stdout while the first recording opened the microphone) was lost.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import logging, os
from mcp_listen.cli import main as cli

cli._setup_logging("INFO")
saved = os.dup(2)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 2)  # as sounddevice._initialize does while PortAudio starts
logging.getLogger("mcp_listen.test").warning("said while PortAudio starts")
os.dup2(saved, 2)
logging.getLogger("mcp_listen.test").warning("said after")
"""


def test_a_line_logged_while_fd_2_points_at_devnull_still_reaches_stderr():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    lines = done.stderr.decode(errors="replace").splitlines()
    assert lines == [
        "mcp-listen WARNING mcp_listen.test: said while PortAudio starts",
        "mcp-listen WARNING mcp_listen.test: said after",
    ], lines
