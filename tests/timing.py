"""Timing bounds in the tests: a bound missed says how loaded the machine was.

The suite runs on 2-core machines beside other work (other test workers, other people's builds). A
bound missed with a load average of 9 is a different finding from one missed on a quiet machine,
so a timing assert's message carries the machine's load: `within` for an upper bound, `near` for
a figure that must match another within a tolerance.
"""

from __future__ import annotations

import os


def machine_load() -> str:
    """The load averages and the CPU count, in words for an assert's message."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} over 1 / 5 / 15 min on {os.cpu_count()} CPUs"


def within(value: float, bound: float, what: str, unit: str = "s") -> None:
    """assert value <= bound; missed, the message names what was timed, both figures and the load."""
    assert value <= bound, f"{what}: {value:.3g} {unit}, over the {bound:g} {unit} bound ({machine_load()})"


def near(value: float, expected: float, tolerance: float, what: str, unit: str = "ms") -> None:
    """assert |value - expected| <= tolerance, with both figures and the load in the message."""
    off = abs(value - expected)
    assert off <= tolerance, (
        f"{what}: {value:.4g} {unit} against {expected:.4g} {unit}, {off:.3g} {unit} apart "
        f"(at most {tolerance:g}; {machine_load()})"
    )
