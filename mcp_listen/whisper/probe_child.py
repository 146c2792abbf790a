"""Probe process: can whisper.cpp load this model file and run it, here? Answered by exit status.

Run by probe._probe as `python -I probe_child.py FD PATH AS_ROOM DATA_ROOM`:
FD is the server's open descriptor of the model (passed down), PATH what whisper.cpp opens
(/proc/self/fd/FD on Linux, so the very file the server checked). AS_ROOM and DATA_ROOM are the
server's headroom under RLIMIT_AS and RLIMIT_DATA in bytes (-1: no limit); this process keeps
exactly that headroom, so a model that does not fit the server does not fit here either.

Exit 0: loaded and transcribed 1 s of silence. Exit 3: whisper.cpp refused the file (its last
error line on stderr). Killed by a signal (SIGABRT, SIGSEGV): whisper.cpp would have taken the
server down. Imports nothing from mcp_listen; writes nothing to stdout.
"""

from __future__ import annotations

import os
import sys

REFUSED = 3
SAMPLE_RATE = 16000
"""whisper.cpp's input rate: limits.SAMPLE_RATE, copied because this script runs isolated
(`python -I`) and imports nothing from mcp_listen; tests/test_homes.py pins the two equal."""
# One encoder pass (every encoder op, including the convolutions an all-F32 file aborts in) and
# one decoder step, as cheaply as whisper_full allows: ~0.3 s on tiny.en. One thread: OpenMP
# threads spin, and on a busy 2-core machine two of them made this 1-4 s instead.
SMALLEST_RUN = dict(
    n_threads=1,
    audio_ctx=64,
    max_tokens=1,
    temperature_inc=0.0,
    single_segment=True,
    no_timestamps=True,
    no_context=True,
    language="en",
    print_progress=False,
    print_realtime=False,
    print_timestamps=False,
)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def keep_headroom(as_room: int, data_room: int) -> None:
    """Lower this process's limits to what it maps now plus the server's headroom."""
    import resource

    for limit, field, room in ((resource.RLIMIT_AS, "VmSize", as_room), (resource.RLIMIT_DATA, "VmData", data_room)):
        if room < 0:
            continue
        _, hard = resource.getrlimit(limit)
        soft = _status_bytes(field) + room
        resource.setrlimit(limit, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def main(argv: list[str]) -> int:
    _fd, path, as_room, data_room = argv[1], argv[2], int(argv[3]), int(argv[4])
    os.putenv("GGML_NO_BACKTRACE", "1")  # else ggml's abort first runs gdb for a backtrace (seconds)
    import _pywhispercpp as pw
    import numpy as np

    errors: list[str] = []
    pw.whisper_log_set(lambda level, text: errors.append(str(text)) if int(level) >= 4 else None)
    keep_headroom(as_room, data_room)
    ctx = pw.whisper_init_from_file_with_params(path, pw.whisper_context_default_params())
    if ctx is None or any("fail" in line.lower() for line in errors):
        sys.stderr.write((errors[-1] if errors else "whisper_init returned no context").strip() + "\n")
        return REFUSED
    params = pw.whisper_full_default_params(pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)
    for name, value in SMALLEST_RUN.items():
        setattr(params, name, value)
    silence = np.zeros(SAMPLE_RATE * 11 // 10, dtype=np.float32)
    if pw.whisper_full(ctx, params, silence, silence.size) != 0:
        sys.stderr.write((errors[-1] if errors else "whisper_full failed").strip() + "\n")
        return REFUSED
    pw.whisper_free(ctx)
    pw.whisper_log_set(None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
