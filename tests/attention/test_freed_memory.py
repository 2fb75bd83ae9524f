"""``return_freed_memory`` and ``ResidentBudget`` against the kernel's own count of the process's
resident pages (/proc/self/status), in fresh processes: inside a long test session the heap
holds whatever earlier tests freed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import headlab
from headlab.attention.freed_memory import ResidentBudget, resident_bytes, return_freed_memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc, /proc: Linux")

# 2,000 blocks of 96 KiB (under glibc's initial 128 KiB mmap threshold, so they come from the
# heap), all freed but the last, which holds the heap's top so that glibc's own trimming cannot
# give the rest back: 187 MiB freed and resident. The snippet after it prints a JSON line.
SETUP = """
import json, sys
sys.path[:0] = sys.argv[1:]
from headlab.attention import freed_memory

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

def pile(size=96 * 1024, keep=slice(-1, None)):
    # 2,000 blocks of size bytes, their pages touched; the blocks keep stay alive
    blocks = [bytearray(size) for _ in range(2000)]
    for b in blocks:
        b[::4096] = b"x" * len(b[::4096])
    return blocks[keep]
"""
FREED = 1999 * 96 * 1024


def _child(snippet: str) -> dict:
    src = str(Path(headlab.__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "-c", SETUP + snippet, src], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@linux
def test_freed_heap_pages_leave_the_resident_set():
    row = _child(
        "top = pile(); held = rss(); ran = freed_memory.return_freed_memory()\n"
        "print(json.dumps({'held': held, 'after': rss(), 'ran': ran}))"
    )
    if not row["ran"]:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert row["held"] - row["after"] >= 0.9 * FREED


@linux
def test_a_budget_returns_only_what_piled_up_past_it_since_the_first_check():
    # Every other block freed: 96 KiB holes that the 100 KiB blocks after cannot take, so the
    # second pile takes new pages and the holes of both stay resident, 191 MiB in all.
    row = _child(
        "budget = freed_memory.ResidentBudget(300 * 2**20)\n"
        "first = budget.check()\n"  # the floor, never a return
        "a = pile(96 * 1024, slice(None, None, 2))\n"
        "under = budget.check()\n"  # 187 MiB above the floor: under 300
        "b = pile(100 * 1024, slice(None, None, 2))\n"
        "held = rss(); over = budget.check()\n"  # 382 MiB above: returned
        "print(json.dumps({'first': first, 'under': under, 'over': over, 'held': held,\n"
        "                  'after': rss(), 'returns': budget.returns,\n"
        "                  'ran': freed_memory.return_freed_memory()}))"
    )
    if not row["ran"]:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert (row["first"], row["under"], row["over"], row["returns"]) == (False, False, True, 1)
    assert row["held"] - row["after"] >= 0.9 * 1000 * (96 + 100) * 1024


def test_it_says_whether_it_ran_and_can_run_again():
    first = return_freed_memory()
    assert isinstance(first, bool)
    assert return_freed_memory() is first  # nothing left to return is not an error
    budget = ResidentBudget(2**40)
    assert budget.check() is False and budget.check() is False and budget.returns == 0
    if sys.platform.startswith("linux"):
        assert resident_bytes() > 0
