"""How many threads whisper.cpp gets for the next piece: the CPUs this process may run on, less the
ones other programs are using now (over the last second or so); where that cannot be read, less one
more while pieces run much slower than usual.

Why not a fixed count: ggml's threads wait for each other at every step of the graph, so one thread
that shares a core with a busy program stalls all the others. Measured on 2 cores with one core kept
busy by another process: a 10.7 s dictation waited 17.9 s after the user stopped on 2 threads, and
2 ms on 1. On an idle machine the count is what it always was (the usable CPUs, at most
`MAX_AUTO_THREADS`), so the quiet figures do not change.

What "in use by others" means: the machine's busy time on our CPUs (Linux's /proc/stat, per CPU)
over at least `WINDOW_S`, less this process's own CPU time. Time of niced programs counts at
`NICED_WEIGHT`: the scheduler gives a nice-10 program about a tenth of a core against ours, so it
takes little from whisper. A shorter window is noise: /proc/stat counts in 10 ms ticks, so over
0.1 s on 2 CPUs one tick either way is a tenth of a CPU, and a quiet machine read as half a CPU
busy lost a thread.

Where /proc/stat is missing (macOS, Windows) the slow-piece rule adapts instead: a pass much slower
than the best recent one of the same encoder context drops a thread. Only passes of the same context
compare: whisper's encoder runs at least 512 frames (10 s), so a 1.2 s piece costs several times more
per second of audio than a 7 s one, and comparing per second of audio dropped a thread on a quiet
machine (bench/README.md, "Whisper's thread choice"). Where the busy time can be read, other
programs are seen directly and the slow-piece rule stays off: it could only add false drops.
`MCP_LISTEN_WHISPER_THREADS`, when set, fixes the count and none of this runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

MAX_AUTO_THREADS = 4
"""More threads than this gain little for whisper's small models and cost memory (ggml's buffers)."""

NICED_WEIGHT = 0.25
"""The share of a niced program's CPU time that counts as taken from whisper."""

SLOW_RATIO = 1.8
"""A pass this many times slower than the best recent one on the same count and encoder context
means the threads are waiting for each other: the next piece gets one thread less."""

RECOVERED_RATIO = 1.25
"""A piece within this ratio of the best recent one on its count is a good one."""

GOOD_TO_RECOVER = 3
"""Good pieces in a row that give a dropped thread back (one would flip between counts)."""

MIN_TIMED_AUDIO_S = 1.0
"""Pieces shorter than this are dominated by fixed costs; their speed is not compared."""

TAKEN_FROM = 0.75
"""Other programs take a CPU from whisper once they use this much of one: a program spinning at nice 0
reads 0.9-1.0, while a quiet machine's sound server, player and client read 0.0-0.1 and the odd
burst 0.5 (which, rounded, took a thread on a quiet machine)."""

MIN_READING_S = 0.1
"""Two CPU readings closer than this are too noisy to say what is busy: the last estimate stands."""

WINDOW_S = 1.0
"""The busy time of others is measured over at least this long when the readings go back so far
(the first second of a server takes what it has, from MIN_READING_S)."""

KEPT_READINGS = 64
"""Readings kept for the window: choose() runs a few times a second at most."""

RECENT_PIECES = 8
"""How many passes per thread count and encoder context the 'best recent' time is taken from."""

STAT_PATH = "/proc/stat"


def _affinity() -> set[int] | None:
    """The CPUs this process may run on, where the system says (Linux); None elsewhere."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity where the system has one, else all)."""
    cpus = _affinity()
    return max(1, len(cpus) if cpus else os.cpu_count() or 1)


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True)
class Reading:
    """Busy and total jiffies summed over our CPUs, how many CPUs that is, this process's CPU
    seconds, and when."""

    busy: float
    total: float
    cpus: int
    own_s: float
    at: float


class CpuMeter:
    """CPUs in use by other programs between two readings of /proc/stat."""

    def __init__(
        self,
        stat_path: str = STAT_PATH,
        clock: Callable[[], float] = time.monotonic,
        own_cpu_s: Callable[[], float] = _own_cpu_s,
        cpus: set[int] | None = None,
    ) -> None:
        self._path = stat_path
        self._clock = clock
        self._own = own_cpu_s
        self._cpus = _affinity() if cpus is None else cpus
        first = self.read()
        self._readings: deque[Reading] = deque([first] if first is not None else [], maxlen=KEPT_READINGS)
        self._others: float | None = None  # none yet: the first interval was too short

    def read(self) -> Reading | None:
        """One reading; None where /proc/stat cannot be read or parsed."""
        try:
            with open(self._path, encoding="ascii", errors="replace") as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            return None
        busy = total = 0.0
        seen = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu":
                continue
            index = name[3:]
            if not index.isdigit() or (self._cpus is not None and int(index) not in self._cpus):
                continue
            fields = rest.split()
            if len(fields) < 8 or not all(f.isdigit() for f in fields[:8]):
                continue
            user, nice, system, idle, iowait, irq, softirq, steal = (float(f) for f in fields[:8])
            busy += user + NICED_WEIGHT * nice + system + irq + softirq + steal
            total += user + nice + system + idle + iowait + irq + softirq + steal
            seen += 1
        return Reading(busy, total, seen, self._own(), self._clock()) if seen else None

    def others(self) -> float | None:
        """CPUs' worth of time other programs used over the last WINDOW_S or so (None: not measurable
        here, or no reading far enough back yet)."""
        now = self.read()
        if now is None:
            self._readings.clear()
            return None
        since = self._window_start(now)
        self._readings.append(now)
        if since is None:
            return self._others
        wall = now.at - since.at
        busy_cpus = now.cpus * (now.busy - since.busy) / (now.total - since.total)
        own_cpus = max(0.0, now.own_s - since.own_s) / wall
        self._others = max(0.0, busy_cpus - own_cpus)
        return self._others

    def _window_start(self, now: Reading) -> Reading | None:
        """The reading to measure from: the latest one at least WINDOW_S old, else the oldest one at
        least MIN_READING_S old; older readings are let go."""
        usable = [r for r in self._readings if now.at - r.at >= MIN_READING_S and now.total > r.total]
        if not usable:
            return None
        old_enough = [r for r in usable if now.at - r.at >= WINDOW_S]
        start = old_enough[-1] if old_enough else usable[0]
        while self._readings and self._readings[0] is not start:
            self._readings.popleft()
        return start


@dataclass(frozen=True)
class Choice:
    """A thread count and the reason for it, in words a user can act on."""

    threads: int
    reason: str


def threads_now(fixed: int | None, window_s: float = 0.3) -> Choice:
    """What a fresh policy would choose after watching the CPUs for `window_s` (for `doctor`)."""
    policy = ThreadPolicy(fixed=fixed)
    if fixed is None:
        time.sleep(window_s)
    return policy.choose()


class ThreadPolicy:
    """The thread count for each whisper pass (`choose`), corrected by how fast the last ones ran
    (`record`). Thread-safe: the phrase worker and a call's thread may both ask."""

    def __init__(self, fixed: int | None = None, cpus: int | None = None, meter: CpuMeter | None = None) -> None:
        self.fixed = fixed
        self.cpus = usable_cpus() if cpus is None else cpus
        self.ceiling = fixed if fixed is not None else max(1, min(MAX_AUTO_THREADS, self.cpus))
        self._meter = meter if meter is not None or fixed is not None else CpuMeter()
        self._dropped = 0
        self._good = 0
        self._times: dict[tuple[int, int], deque[float]] = {}
        self._measured = False
        self._lock = threading.Lock()

    def choose(self) -> Choice:
        """The count for the next pass, and why."""
        if self.fixed is not None:
            return Choice(self.fixed, "set by MCP_LISTEN_WHISPER_THREADS")
        with self._lock:  # the phrase worker and a call's thread may ask at once: one reading each
            others = self._meter.others() if self._meter is not None else None
            self._measured = others is not None
            taken = 0 if others is None else int(others + 1 - TAKEN_FROM)
            free = min(self.ceiling, self.cpus - taken)
            threads = max(1, free - self._dropped)
            reason = f"{self.cpus} usable CPU{'s' if self.cpus != 1 else ''}"
            if others is not None:
                reason += f", {others:.1f} in use by other programs"
            if self._dropped:
                reason += f", {self._dropped} dropped after slow pieces"
        return Choice(threads, reason)

    def timed(self) -> dict[int, int]:
        """How many recent passes were timed on each thread count (what the policy has learnt)."""
        with self._lock:
            counts: dict[int, int] = {}
            for (threads, _), times in self._times.items():
                counts[threads] = counts.get(threads, 0) + len(times)
            return counts

    def record(self, threads: int, audio_s: float, elapsed_s: float, context: int = 0) -> None:
        """How long a pass of `audio_s` seconds took on `threads` with an encoder `context` (whisper's
        audio_ctx, 0 the full window). Where other programs' CPU time cannot be read: drop a thread
        when it ran much slower than the best recent pass on the same count and context, give it back
        after `GOOD_TO_RECOVER` passes at the usual speed."""
        if self.fixed is not None or audio_s < MIN_TIMED_AUDIO_S or elapsed_s <= 0:
            return
        with self._lock:
            if self._measured:  # the meter sees other programs; slow passes say nothing more
                return
            recent = self._times.setdefault((threads, context), deque(maxlen=RECENT_PIECES))
            best = min(recent) if recent else None
            recent.append(elapsed_s)
            if best is None:
                return
            if elapsed_s > SLOW_RATIO * best:
                self._dropped, self._good = min(self._dropped + 1, self.ceiling - 1), 0
            elif elapsed_s <= RECOVERED_RATIO * best and self._dropped:
                self._good += 1
                if self._good >= GOOD_TO_RECOVER:
                    self._dropped, self._good = self._dropped - 1, 0
