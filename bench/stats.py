"""What every bench script shares besides the rig: medians with their spread, targets, the machine
and how busy it was, the report file, and a short command line."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def summary(values: Iterable[float], digits: int = 1) -> dict:
    """Median, min, max, p90 and the raw values (rounded), or n=0 when there is nothing."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return {"n": 0}
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    r = lambda x: round(x, digits)  # noqa: E731
    return {"n": len(xs), "median": r(statistics.median(xs)), "min": r(xs[0]), "max": r(xs[-1]), "p90": r(p90),
            "values": [r(x) for x in xs]}  # fmt: skip


def verdict(value: float | None, target: float, *, lower_is_better: bool = True) -> dict:
    """A figure against its target, for the report's `targets` table."""
    if value is None:
        return {"value": None, "target": target, "ok": None}
    return {"value": round(value, 3), "target": target, "ok": value <= target if lower_is_better else value >= target}


def dig(report: dict, *keys: str) -> Any:
    """report[k1][k2]..., or None where the run did not measure it."""
    for key in keys:
        report = report.get(key) if isinstance(report, dict) else None
    return report


class CpuBusy:
    """Share of all CPUs busy (every process, not only ours) since construction: other work on the
    machine slows the wall-clock figures, never the ones counted in samples."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)

    def percent(self) -> float:
        busy, total = self._read()
        return round(100 * (busy - self.start[0]) / max(1, total - self.start[1]), 1)


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def machine(*packages: str) -> dict[str, Any]:
    """The machine at the start of a run, and the versions of the packages its figures depend on."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown")  # fmt: skip
    mem = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
    versions = {}
    for pkg in ("mcp", "numpy", "onnxruntime", *packages):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gb": round(mem / 1024 / 1024, 1), "kernel": platform.release(),
            "python": platform.python_version(), "versions": versions, "loadavg_start": loadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip


class Run:
    """One report: the machine at the start, and at the end how busy it was and how long it took."""

    def __init__(self, *packages: str, **config: Any) -> None:
        self.began, self.busy = time.monotonic(), CpuBusy()
        cfg = {k: [str(x) for x in v] if isinstance(v, list) else str(v) if isinstance(v, Path) else v
               for k, v in config.items()}  # fmt: skip
        self.report: dict[str, Any] = {"machine": machine(*packages), "config": cfg}

    def end(self) -> dict[str, Any]:
        self.report["machine"].update(cpu_busy_during_run_pct=self.busy.percent(), loadavg_end=loadavg())
        self.report["elapsed_s"] = round(time.monotonic() - self.began, 1)
        return self.report


def save_report(report: dict[str, Any], out: Path, show: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Write the JSON report (every raw value), show its summary and targets, and say where it went."""
    Path(out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if show:
        show(report)
    for name, v in report.get("targets", {}).items():
        mark = "PASS" if v.get("ok") else "MISS" if v.get("ok") is False else "  - "
        print(f"  {mark} {name}" + (f": {v['value']} (target {v['target']})" if "target" in v else ""))
    m = report.get("machine", {})
    print(f"report: {out} ({report.get('elapsed_s')} s; {m.get('cpu_busy_during_run_pct')} % of all CPUs busy)")


def cli(doc: str, argv: list[str] | None, *options: tuple[str, Any, str]) -> argparse.Namespace:
    """A command line from (flag, default, help): the default's type is the option's; False is a
    switch, a list a repeatable path, None an optional path."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default, text in options:
        if isinstance(default, bool):
            p.add_argument(flag, action="store_true", help=text)
        elif isinstance(default, list):
            p.add_argument(flag, action="append", type=Path, help=text)
        else:
            kind = Path if default is None or isinstance(default, Path) else type(default)
            p.add_argument(flag, type=kind, default=default, help=f"{text} (default {default})")
    return p.parse_args(argv)
