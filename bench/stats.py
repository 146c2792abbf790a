"""Small statistics helpers: every figure is reported as a median with its spread."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def summary(values: Iterable[float], digits: int = 1) -> dict:
    """Median, min, max, p90 and the raw values (rounded), or n=0 when there is nothing."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return {"n": 0}
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return {
        "n": len(xs),
        "median": round(statistics.median(xs), digits),
        "min": round(xs[0], digits),
        "max": round(xs[-1], digits),
        "p90": round(p90, digits),
        "values": [round(x, digits) for x in xs],
    }


def fmt(s: dict, unit: str = "ms") -> str:
    """'123.4 ms (min 100.0, max 150.2, n=5)' for the console."""
    if not s or s.get("n", 0) == 0:
        return "n/a"
    return f"{s['median']} {unit} (min {s['min']}, max {s['max']}, n={s['n']})"


def verdict(value: float | None, target: float, *, lower_is_better: bool = True) -> dict:
    """A figure against its target, for the JSON report's `targets` table."""
    if value is None:
        return {"value": None, "target": target, "ok": None}
    ok = value <= target if lower_is_better else value >= target
    return {"value": round(value, 3), "target": target, "ok": ok}
