"""How many threads whisper.cpp gets for the next piece: the CPUs this process may run on, less the
ones other programs are using now, less one more while pieces run much slower than usual.

Why not a fixed count: ggml's threads wait for each other at every step of the graph, so one thread
that shares a core with a busy program stalls all the others. Measured on 2 cores with one core kept
busy by another process: a 10.7 s dictation waited 17.9 s after the user stopped on 2 threads, and
2 ms on 1. On an idle machine the count is what it always was (the usable CPUs, at most
`MAX_AUTO_THREADS`), so the quiet figures do not change.

What "in use by others" means: the machine's busy time on our CPUs (Linux's /proc/stat, per CPU)
between two readings, less this process's own CPU time. Time of niced programs counts at
`NICED_WEIGHT`: the scheduler gives a nice-10 program about a tenth of a core against ours, so it
takes little from whisper. Where /proc/stat is missing (macOS, Windows) only the slow-piece rule
adapts. `MCP_LISTEN_WHISPER_THREADS`, when set, fixes the count and none of this runs.
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
"""A piece this many times slower per second of audio than the best recent one on the same count
means the threads are waiting for each other: the next piece gets one thread less."""

RECOVERED_RATIO = 1.25
"""A piece within this ratio of the best recent one on its count is a good one."""

GOOD_TO_RECOVER = 3
"""Good pieces in a row that give a dropped thread back (one would flip between counts)."""

MIN_TIMED_AUDIO_S = 1.0
"""Pieces shorter than this are dominated by fixed costs; their speed is not compared."""

MIN_READING_S = 0.1
"""Two CPU readings closer than this are too noisy to say what is busy: the last estimate stands."""

RECENT_PIECES = 8
"""How many pieces per thread count the 'best recent' speed is taken from."""

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
        self._last = self.read()
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
        """CPUs' worth of time other programs used since the last reading (None: not measurable here,
        or no reading far enough back yet)."""
        now = self.read()
        last = self._last
        if now is None or last is None:
            self._last = now
            return None
        wall = now.at - last.at
        if wall < MIN_READING_S or now.total <= last.total:
            return self._others
        busy_cpus = now.cpus * (now.busy - last.busy) / (now.total - last.total)
        own_cpus = max(0.0, now.own_s - last.own_s) / wall
        self._others = max(0.0, busy_cpus - own_cpus)
        self._last = now
        return self._others


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
        self._speeds: dict[int, deque[float]] = {}
        self._lock = threading.Lock()

    def choose(self) -> Choice:
        """The count for the next pass, and why."""
        if self.fixed is not None:
            return Choice(self.fixed, "set by MCP_LISTEN_WHISPER_THREADS")
        with self._lock:  # the phrase worker and a call's thread may ask at once: one reading each
            others = self._meter.others() if self._meter is not None else None
            free = self.ceiling if others is None else min(self.ceiling, int(self.cpus - others + 0.5))
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
            return {threads: len(speeds) for threads, speeds in self._speeds.items()}

    def record(self, threads: int, audio_s: float, elapsed_s: float) -> None:
        """How long a pass of `audio_s` seconds took on `threads`: drop a thread when it ran much
        slower than the best recent pass on the same count, give it back after `GOOD_TO_RECOVER` passes
        at the usual speed."""
        if self.fixed is not None or audio_s < MIN_TIMED_AUDIO_S or elapsed_s <= 0:
            return
        speed = elapsed_s / audio_s
        with self._lock:
            recent = self._speeds.setdefault(threads, deque(maxlen=RECENT_PIECES))
            best = min(recent) if recent else None
            recent.append(speed)
            if best is None:
                return
            if speed > SLOW_RATIO * best:
                self._dropped, self._good = min(self._dropped + 1, self.ceiling - 1), 0
            elif speed <= RECOVERED_RATIO * best and self._dropped:
                self._good += 1
                if self._good >= GOOD_TO_RECOVER:
                    self._dropped, self._good = self._dropped - 1, 0
