"""Freed memory goes back to the OS (glibc): measured on this process, not assumed."""

from __future__ import annotations

import os
import platform

import pytest
from rpc import proc_memory_kb

from mcp_listen.engine import memory

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim/mallopt are glibc's")


@glibc_only
def test_release_free_memory_returns_freed_heap_to_the_os():
    blocks = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]  # ~80 MB of malloc'd objects
    keep = blocks[::1000]  # a few survivors scattered through the heap: no plain top-of-heap shrink
    before = proc_memory_kb(os.getpid())["VmRSS"]
    del blocks
    after_free = proc_memory_kb(os.getpid())["VmRSS"]
    assert memory.release_free_memory() is True
    after_trim = proc_memory_kb(os.getpid())["VmRSS"]
    assert after_trim < after_free - 40_000, (before, after_free, after_trim)
    assert len(keep) == 40


@glibc_only
def test_limit_arenas_is_accepted_by_glibc():
    assert memory.limit_arenas() is True


def test_both_are_harmless_without_glibc(monkeypatch):
    monkeypatch.setattr(memory, "_libc", lambda: None)
    assert memory.limit_arenas() is False
    assert memory.release_free_memory() is False
    memory.release_in_background()  # no error, no effect
