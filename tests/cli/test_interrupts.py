"""Ctrl-C and SIGTERM end a command at any point: 130 and 143, one line, nothing half-written.

Each test runs headlab's entry point in a real process on a command that blocks: in Python
(``time.sleep``, where the handler runs at once) or inside a Rust call that retries on EINTR
(``safetensors`` opening a FIFO, the hang of issue 31, where no Python handler can run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and signals")

# A headlab entry point whose only command blocks as asked; the temporary file it names is
# registered as a write under way (the atomic writer's temp file).
SCRIPT = """
import os, sys, time
import typer
import headlab.cli.app as app_module
from headlab.cli import main as entry
from headlab.results.interrupts import temporary

blocker = typer.Typer()

@blocker.command()
def block(how: str, fifo: str, temp: str):
    with temporary(temp):  # as headlab.results.atomic_files.atomic_write_bytes does
        try:
            open(temp, "wb").write(b"half")
            print("ready", flush=True)
            if how == "rust":
                from safetensors import safe_open
                safe_open(fifo, framework="numpy")
            else:
                while True:
                    time.sleep(0.05)
        except BaseException:
            os.unlink(temp)
            raise

app_module.app = blocker
sys.argv = ["headlab", *sys.argv[1:]]
entry.main()
"""


def start(tmp_path: Path, how: str) -> tuple[subprocess.Popen, Path]:
    fifo, temp = tmp_path / "model.safetensors", tmp_path / ".out.json.tmp"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, how, str(fifo), str(temp)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout.readline() == b"ready\n"
    time.sleep(0.5)  # inside the blocking call
    return process, temp


@pytest.mark.parametrize("how", ["python", "rust"])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_a_blocked_command_with_its_code(tmp_path, how, signum, code):
    process, temp = start(tmp_path, how)
    started = time.monotonic()
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"{signal.Signals(signum).name} did not end a command blocked in {how}")
    # Stuck in Rust, the command ends *by* the signal (a shell reports 128 + signal as well).
    assert process.returncode in ((code,) if how == "python" else (code, -signum)), err
    assert b"Traceback" not in err
    assert err.decode().strip().splitlines()[-1] == "headlab: aborted"
    assert not temp.exists(), "the write under way was left half-written"
    assert time.monotonic() - started < 15


def test_the_watchdog_waits_for_a_responsive_command(tmp_path):
    """A command whose handler runs is never cut short: its own cleanup (here the temporary's
    context exit) runs, so the file is removed by the code, not by the watchdog."""
    from headlab.results.interrupts import GRACE_SECONDS

    process, _ = start(tmp_path, "python")
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 143
    assert time.monotonic() - started < GRACE_SECONDS  # ended by its handler, not the watchdog
