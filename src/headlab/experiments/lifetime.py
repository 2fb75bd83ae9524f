"""Worker processes end with the process that started them, and say nothing of their own.

When a sweep's main process is killed (``kill -9``, the OOM killer), nothing runs its clean-up:
its pool workers and progress manager would stay alive under PID 1, training for nobody. Each
of them runs ``die_with_parent`` first: on Linux the kernel sends it SIGKILL when its parent
ends (``prctl(PR_SET_PDEATHSIG)``), and on every system a daemon thread checks the parent
twice a second and ends the process when it is gone. The resource tracker then sees its last
holder go and exits too.

A worker's own stderr is closed: when the parent's side dies first (the manager killed), a
worker would print a traceback of the broken connection, while the parent already says in one
line what happened. Jobs report failures by raising, which reaches the parent, not by printing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_SECONDS = 0.5


def die_with_parent(parent: int, from_main_thread: bool) -> None:
    """Process initializer: end this process when ``parent`` (the pid that started it) ends.

    from_main_thread: whether the parent started it from its main thread. The kernel's signal
    fires when the *thread* that started the process ends, so it is used only then; the
    watchdog thread covers the rest.
    """
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    if sys.platform == "linux" and from_main_thread:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="headlab-parent").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os._exit(1)


def initializer_args() -> tuple[int, bool]:
    """``die_with_parent``'s arguments, computed in the parent that starts the processes."""
    return os.getpid(), threading.current_thread() is threading.main_thread()
