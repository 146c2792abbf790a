"""whisper/threads.py: the thread count follows the CPUs other programs leave free, drops after
slow pieces and comes back when they are fast again; MCP_LISTEN_WHISPER_THREADS still wins.

The CPU readings come from a /proc/stat written by the test (the real one's numbers depend on what
else this machine runs); one test reads the real file and a real busy process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import machine_load

from mcp_listen.config import load_settings
from mcp_listen.whisper import threads as T


class Stat:
    """A /proc/stat of two CPUs whose counters the test advances; a clock and own CPU time to match."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.now = 0.0
        self.own = 0.0
        self.cpus = {0: [0] * 8, 1: [0] * 8}
        self.write()

    def write(self) -> None:
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        lines += [f"cpu{i} " + " ".join(str(v) for v in f) + " 0 0" for i, f in self.cpus.items()]
        self.path.write_text("\n".join(lines) + "\nintr 1 2 3\n")

    def advance(self, seconds: float, busy: dict[int, float], niced: dict[int, float] | None = None, own=0.0):
        """`seconds` pass; CPU i is busy for busy[i] of them (user time), niced[i] at nice > 0."""
        ticks = round(seconds * 100)
        for i, f in self.cpus.items():
            user = round(ticks * busy.get(i, 0.0))
            nice = round(ticks * (niced or {}).get(i, 0.0))
            f[0] += user
            f[1] += nice
            f[3] += ticks - user - nice
        self.now += seconds
        self.own += own
        self.write()

    def meter(self, cpus=frozenset({0, 1})) -> T.CpuMeter:
        return T.CpuMeter(str(self.path), clock=lambda: self.now, own_cpu_s=lambda: self.own, cpus=set(cpus))


@pytest.fixture
def stat(tmp_path):
    return Stat(tmp_path / "stat")


def policy(stat: Stat, cpus: int = 2) -> T.ThreadPolicy:
    return T.ThreadPolicy(cpus=cpus, meter=stat.meter())


def test_idle_machine_uses_every_usable_cpu(stat):
    p = policy(stat)
    stat.advance(1.0, {})
    choice = p.choose()
    assert choice.threads == 2
    assert "2 usable CPUs" in choice.reason and "0.0 in use by other programs" in choice.reason


def test_one_core_busy_with_another_program_leaves_one_thread(stat):
    p = policy(stat)
    stat.advance(1.0, {0: 1.0})
    assert p.choose().threads == 1


def test_our_own_cpu_time_is_not_counted_as_another_program(stat):
    p = policy(stat)
    stat.advance(1.0, {0: 0.9, 1: 0.9}, own=1.8)  # whisper itself kept both cores busy
    assert p.choose().threads == 2


def test_a_niced_program_takes_little_from_whisper(stat):
    p = policy(stat)
    stat.advance(1.0, {}, niced={0: 1.0})  # nice 10: the scheduler gives it ~1/10 against us
    assert p.choose().threads == 2


def test_only_the_cpus_this_process_may_run_on_count(stat):
    meter = stat.meter(cpus={1})
    p = T.ThreadPolicy(cpus=1, meter=meter)
    stat.advance(1.0, {0: 1.0})  # CPU 0 is not ours: its load does not matter
    assert p.choose().threads == 1
    assert meter.others() is not None and meter.others() < 0.05


def test_readings_too_close_together_keep_the_last_estimate(stat):
    meter = stat.meter()
    stat.advance(0.05, {0: 1.0})
    assert meter.others() is None  # nothing measured yet
    stat.advance(1.0, {0: 1.0})
    assert meter.others() == pytest.approx(1.0, abs=0.05)
    stat.advance(0.01, {})
    assert meter.others() == pytest.approx(1.0, abs=0.05)


def test_without_proc_stat_the_ceiling_and_the_slow_rule_decide(tmp_path):
    meter = T.CpuMeter(str(tmp_path / "missing"))
    p = T.ThreadPolicy(cpus=4, meter=meter)
    assert p.choose().threads == 4
    assert "in use" not in p.choose().reason


def test_a_garbled_stat_file_is_not_measurable(tmp_path):
    bad = tmp_path / "stat"
    bad.write_text("cpu0 x y z\ncpu1 1 2\n\x00\x01")
    assert T.CpuMeter(str(bad)).read() is None


def test_a_slow_piece_drops_a_thread_and_fast_ones_give_it_back(tmp_path):
    p = T.ThreadPolicy(cpus=2, meter=T.CpuMeter(str(tmp_path / "missing")))
    p.record(2, audio_s=4.0, elapsed_s=0.4)  # the usual speed on 2 threads
    p.record(2, audio_s=4.0, elapsed_s=2.0)  # 5x slower: the threads wait for each other
    assert p.choose().threads == 1
    assert "dropped after slow pieces" in p.choose().reason
    for _ in range(T.GOOD_TO_RECOVER):
        p.record(1, audio_s=4.0, elapsed_s=0.7)
    assert p.choose().threads == 1  # first a piece on 1 thread sets the usual speed there...
    p.record(1, audio_s=4.0, elapsed_s=0.7)
    assert p.choose().threads == 2  # ...then enough at that speed give the thread back


def test_a_short_piece_is_compared_only_with_passes_of_its_own_encoder_context(tmp_path):
    """whisper's encoder runs at least 512 frames, so a 1.2 s piece costs far more per second of audio
    than a 7 s one on a quiet machine: that is no reason to drop a thread."""
    p = T.ThreadPolicy(cpus=2, meter=T.CpuMeter(str(tmp_path / "missing")))
    p.record(2, audio_s=7.0, elapsed_s=0.20, context=512)
    p.record(2, audio_s=1.2, elapsed_s=0.15, context=512)  # 4x slower per second of audio, same work
    p.record(2, audio_s=10.5, elapsed_s=0.30, context=768)  # another context: compared with its own
    assert p.choose().threads == 2
    p.record(2, audio_s=1.2, elapsed_s=0.60, context=512)  # 3x the best pass of its context: threads wait
    assert p.choose().threads == 1


def test_where_other_programs_are_seen_slow_passes_drop_no_thread(stat):
    """The meter sees other programs directly; a slow pass on a quiet machine (a decoder fallback,
    a longer text) is no sign of contention."""
    p = policy(stat)
    stat.advance(1.0, {})
    assert p.choose().threads == 2
    p.record(2, audio_s=4.0, elapsed_s=0.4, context=512)
    p.record(2, audio_s=4.0, elapsed_s=2.0, context=512)
    assert p.choose().threads == 2


def test_the_busy_time_of_others_is_read_over_a_second_not_between_two_close_calls(stat):
    """Over 0.1 s one 10 ms tick is a tenth of a CPU: a quiet second with one busy tick between two
    close calls must not read as half a CPU taken."""
    meter = stat.meter()
    stat.advance(1.0, {})
    assert meter.others() == pytest.approx(0.0, abs=0.01)
    stat.advance(0.1, {0: 0.5, 1: 0.5})  # a burst of ticks between two close readings
    assert meter.others() < 0.2  # measured over the last second: 0.1 CPU, not 1.0


def test_short_pieces_are_not_timed(tmp_path):
    p = T.ThreadPolicy(cpus=2, meter=T.CpuMeter(str(tmp_path / "missing")))
    p.record(2, audio_s=0.5, elapsed_s=0.01)
    p.record(2, audio_s=0.5, elapsed_s=0.5)
    assert p.choose().threads == 2


def test_never_fewer_than_one_thread(tmp_path):
    p = T.ThreadPolicy(cpus=2, meter=T.CpuMeter(str(tmp_path / "missing")))
    p.record(2, 4.0, 0.1)
    for _ in range(5):
        p.record(2, 4.0, 10.0)
    assert p.choose().threads == 1


def test_the_environment_variable_fixes_the_count(stat):
    settings = load_settings({"MCP_LISTEN_WHISPER_THREADS": "3"})
    p = T.ThreadPolicy(fixed=settings.whisper_threads, meter=stat.meter())
    stat.advance(1.0, {0: 1.0, 1: 1.0})
    p.record(3, 4.0, 0.1)
    p.record(3, 4.0, 10.0)
    assert p.choose() == T.Choice(3, "set by MCP_LISTEN_WHISPER_THREADS")
    assert p.ceiling == 3


def test_unset_the_count_follows_the_machine():
    assert load_settings({}).whisper_threads is None
    p = T.ThreadPolicy()
    assert p.ceiling == min(T.MAX_AUTO_THREADS, T.usable_cpus())


def _cpu_s(pids: list[int]) -> float:
    """The CPU time (user + system) the processes have used so far, from /proc/PID/stat."""
    used = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        used += int(fields[11]) + int(fields[12])  # utime, stime: the stat's 14th and 15th fields
    return used / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux's /proc/stat")
def test_a_real_busy_process_on_every_cpu_is_seen():
    """The real /proc/stat: one spinning child per usable CPU is seen as others' load. What the meter
    must see is what the children really used meanwhile, counted as the meter counts it (at NICED_WEIGHT
    when they are niced, as they are when this test runs niced), not an absolute count: other work,
    niced or not, takes its own share of the CPUs. The meter reads for at least a second, and on a
    machine so busy that the children get little, until they have used 0.3 CPU-seconds that count."""
    spin = "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass"
    children = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(T.usable_cpus())]
    pids = [child.pid for child in children]
    weight = T.NICED_WEIGHT if os.getpriority(os.PRIO_PROCESS, 0) > 0 else 1.0  # the children's nice is ours
    try:
        meter = T.CpuMeter()
        started, before = time.monotonic(), _cpu_s(pids)
        time.sleep(1.0)
        while weight * (_cpu_s(pids) - before) < 0.3 and time.monotonic() - started < 15:
            time.sleep(0.2)
        others = meter.others()
        wall, used = time.monotonic() - started, weight * (_cpu_s(pids) - before)
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert used >= 0.3, f"the children used {used:.2f} CPU-seconds that count in {wall:.1f} s ({machine_load()})"
    assert others is not None and others >= 0.75 * used / wall - 0.05, (
        f"the meter saw {others} CPUs used by others while the children alone used {used / wall:.2f} "
        f"over {wall:.1f} s ({machine_load()})"
    )


def test_without_an_affinity_every_cpu_line_counts(stat, monkeypatch):
    """Where the system gives no affinity, the CPUs counted are the ones /proc/stat lists."""
    monkeypatch.setattr(T, "_affinity", lambda: None)
    meter = T.CpuMeter(str(stat.path), clock=lambda: stat.now, own_cpu_s=lambda: stat.own)
    stat.advance(1.0, {0: 1.0})
    assert meter.others() == pytest.approx(1.0, abs=0.05)


def test_half_a_cpu_of_others_is_not_a_cpu_taken(stat):
    """A quiet machine's odd burst (0.5 of a CPU over the last second) keeps every thread; a program
    spinning at nice 0 (0.9 and more) takes one."""
    p = policy(stat)
    stat.advance(1.0, {0: 0.55})
    assert p.choose().threads == 2
    stat.advance(1.0, {0: 0.9})
    assert p.choose().threads == 1
