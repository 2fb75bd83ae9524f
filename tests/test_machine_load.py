"""The benchmarks' busy machine: the competitor starts and spins, stops at the end of its block,
stops by itself after its bound or when its parent is gone; ratios are taken within one load."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
machine_load = pytest.importorskip("machine_load")
side_by_side = pytest.importorskip("side_by_side")

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")


def stat(pid: int) -> list[str] | None:
    """The fields of /proc/pid/stat after the command name, None when the process is gone
    (or a zombie: it has ended and waits to be reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields


def cpu_ticks(pid: int) -> int:
    fields = stat(pid)
    return int(fields[11]) + int(fields[12])  # utime + stime


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stat(pid) is None:
            return True
        time.sleep(0.05)
    return False


# Generous bounds: on a loaded machine (CI's: load 9-19 on 2 cores) a process gets a small share
# of a core, so nothing here asserts a rate or a time; each test waits for its condition.
PATIENCE_S = 120.0


def spins_within(pid: int, ticks: int, seconds: float) -> bool:
    """Whether ``pid`` uses ``ticks`` more clock ticks of CPU (1/100 s on Linux) within
    ``seconds``: a CPU-bound process does however loaded the machine is, a sleeping one never."""
    start = cpu_ticks(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        fields = stat(pid)
        if fields is None:
            return False
        if int(fields[11]) + int(fields[12]) - start >= ticks:
            return True
        time.sleep(0.05)
    return False


@linux
def test_the_competitor_spins_inside_the_block_and_is_stopped_after_it():
    with machine_load.competing("busy") as process:
        assert process.poll() is None
        assert spins_within(process.pid, 20, PATIENCE_S)  # CPU-bound, running in the block
        assert process.poll() is None
    assert process.returncode is not None
    assert gone_within(process.pid, PATIENCE_S)


def test_the_competitor_stops_by_itself_after_its_bound():
    with machine_load.competing("busy", bound_s=1.0) as process:
        assert process.wait(timeout=PATIENCE_S) == 0  # it ended on its own, not by a signal


@linux
def test_the_competitor_stops_when_its_parent_is_killed():
    # A parent killed with SIGKILL cannot stop its competitor: the competitor sees that it was
    # re-parented and stops on its own.
    parent = (
        f"import os, signal, sys; sys.path.insert(0, {str(BENCHMARKS)!r}); import machine_load\n"
        "with machine_load.competing('busy') as p:\n"
        "    print(p.pid, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True)
    assert done.returncode == -9
    assert gone_within(int(done.stdout.split()[0]), PATIENCE_S)


def test_quiet_starts_nothing_and_other_loads_are_refused():
    with machine_load.competing("quiet") as process:
        assert process is None
    refused = pytest.raises(ValueError, match="load must be one of quiet, busy, got 'both'")
    with refused, machine_load.competing("both"):
        pass
    assert machine_load.loads("both") == ("quiet", "busy")
    assert machine_load.loads("busy") == ("busy",)
    with pytest.raises(ValueError, match="got 'loud'"):
        machine_load.loads("loud")


def test_the_table_has_both_loads_with_ratios_within_each():
    medians = {
        ("quiet", "torch"): 100.0,
        ("quiet", "headlab"): 80.0,
        ("busy", "torch"): 150.0,
        ("busy", "headlab"): 300.0,
    }
    assert side_by_side.load_table(medians, "torch", 2048, "tokens") == [
        "| load | implementation | median ms | tokens/s | ratio |",
        "| --- | --- | --- | --- | --- |",
        "| quiet | torch | 100 | 20480.0 | 1.00x |",
        "| quiet | headlab | 80 | 25600.0 | 1.25x |",
        "| busy | torch | 150 | 13653.3 | 1.00x |",
        "| busy | headlab | 300 | 6826.7 | 0.50x |",
    ]


def test_interleaved_alternates_the_order_round_by_round():
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = side_by_side.interleaved(steps, repeats=3, warmup=1)
    assert calls == list("abc") + list("abc") + list("cba") + list("abc")
    assert {name: len(t) for name, t in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for ts in times.values() for t in ts)


# A stand-in for a long-context child: its row says how many of its siblings (children of the
# same parent) run the competitor's loop while it is measured.
SIBLINGS = """
import json, os
def ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
busy = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():  # this script names the loop too
        continue
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            spinning = b"x += i * i" in f.read()
        busy += spinning and ppid(pid) == os.getppid()
    except (FileNotFoundError, ProcessLookupError):
        pass
print(json.dumps({"seconds": 1.0, "cpu_seconds": 1.0, "peak": 2**30, "before": 2**29,
                  "busy": busy}))
"""


@linux
def test_every_long_context_child_of_a_busy_run_has_the_competitor_beside_it(
    monkeypatch, capsys, tmp_path
):
    bench = pytest.importorskip("bench_long_context")
    monkeypatch.setattr(bench, "child_command", lambda *a: [sys.executable, "-c", SIBLINGS])
    routes = ["--random-weights", "--routes", "forward", "streaming", "--lengths", "64", "128"]
    bench.main([*routes, "--load", "both", "--json-out", str(tmp_path / "rows.json")])
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    seen = [(row["length"], row["load"], row["route"], row["busy"]) for row in rows]
    assert seen == [
        (length, load, route, int(load == "busy"))
        for length in (64, 128)
        for load in ("quiet", "busy")
        for route in ("forward", "streaming")
    ]
    out = capsys.readouterr().out
    assert "| 128 | busy | streaming | 1 | 1 | 1.00 | 1.00 | 1.00 |" in out
    assert "load average quiet " in out and ", busy " in out
    assert "streaming at 64 (busy): peak 1.00x forward" in out


def test_the_long_context_table_compares_within_one_load():
    bench = pytest.importorskip("bench_long_context")
    rows = [
        {"route": "forward", "length": 2048, "load": "quiet", "seconds": 5.0, "peak": 2**30},
        {"route": "streaming", "length": 2048, "load": "quiet", "seconds": 8.0, "peak": 2**30},
        {"route": "forward", "length": 2048, "load": "busy", "seconds": 10.0, "peak": 2**30},
        {"route": "streaming", "length": 2048, "load": "busy", "seconds": 30.0, "peak": 2**30},
        {"route": "roles", "length": 2048, "load": "busy", "failed": "MemoryError"},
    ]
    assert bench.table(rows, "forward") == [
        "| length | load | route | seconds | cpu s | peak GiB | peak / forward | time / forward |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        "| 2048 | quiet | forward | 5 | - | 1.00 | 1.00 | 1.00 |",
        "| 2048 | quiet | streaming | 8 | - | 1.00 | 1.00 | 1.60 |",
        "| 2048 | busy | forward | 10 | - | 1.00 | 1.00 | 1.00 |",
        "| 2048 | busy | streaming | 30 | - | 1.00 | 1.00 | 3.00 |",
        "| 2048 | busy | roles | failed | - | - | - | - |",
    ]
    assert bench.verdicts(rows, "forward", (1.5, 3.0)) == [
        "streaming at 2048: peak 1.00x forward (bound 1.5x), time 1.60x (bound 3x): within",
        "streaming at 2048 (busy): peak 1.00x forward (bound 1.5x), time 3.00x (bound 3x): within",
        "roles at 2048 (busy): not compared (failed)",
    ]
    no_busy_base = [r for r in rows if (r["load"], r["route"]) != ("busy", "forward")]
    assert bench.table(no_busy_base, "forward")[-2].endswith("| 30 | - | 1.00 | - | - |")
