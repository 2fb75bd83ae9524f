"""Ctrl-C and SIGTERM end a command at any point, with nothing half-written.

Python runs a signal handler only between bytecodes of the main thread, and no Python thread runs
while a C or Rust call holds the interpreter lock. ``safetensors`` and ``tokenizers`` opening a
FIFO block that way for good (they retry the interrupted ``open``), so the handler never ran and
only ``kill -9`` ended the process. ``install`` therefore starts a watchdog *process*, forked
before anything else is imported: the C-level handler writes the signal's number to a pipe it
reads (``signal.set_wakeup_fd``), and the Python handler tells it that it ran. When it has not
run within ``GRACE_SECONDS`` (the command is stuck), the watchdog removes the temporary files of
the writes under way (``temporary`` reports them), prints ``headlab: aborted`` and sends the same
signal again: the first delivery reset the handler to the default action (``SA_RESETHAND``), so
the command ends *by* that signal, which a shell reports as 130 (SIGINT) or 143 (SIGTERM); if it
still lives two seconds later, SIGKILL. A responsive command is never cut short: its handler
raises ``Interrupted`` (a KeyboardInterrupt), every ``except KeyboardInterrupt`` cleanup runs,
and the CLI exits with ``128 + signal`` itself.

Imports nothing outside the standard library (the files layer registers its temporaries here).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_SECONDS = 3.0  # longer than any single C call of a command (one layer's forward)
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_temporaries: set[str] = set()
_lock = threading.Lock()
_state: dict = {"last": int(signal.SIGINT), "news": None, "watching": False, "received": False}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: ``signum`` says which (the exit code is ``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code() -> int:
    """The exit code of a command ended by the last signal received: 130 (SIGINT, also a
    KeyboardInterrupt raised without a signal) or 143 (SIGTERM)."""
    return 128 + _state["last"]


def _tell(message: bytes) -> None:
    """Send the watchdog a message (NUL-terminated; one write, so it arrives whole)."""
    fd = _state["news"]
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, message + b"\0")


@contextmanager
def temporary(path: str | os.PathLike) -> Iterator[None]:
    """While this block runs, ``path`` is a half-written file: an interrupt that has to end the
    process at once removes it first."""
    name = os.fspath(path)
    with _lock:
        _temporaries.add(name)
    _tell(b"+" + os.fsencode(name))
    try:
        yield
    finally:
        with _lock:
            _temporaries.discard(name)
        _tell(b"-" + os.fsencode(name))


def _reset_after_first(signum: int) -> None:
    """Make the handler of ``signum`` one-shot (``SA_RESETHAND``, through glibc's
    ``sysv_signal``): a second delivery while Python has not run the first takes the default
    action. Nothing happens where libc lacks it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = libc.sysv_signal.restype = ctypes.c_void_p
        libc.signal.argtypes = libc.sysv_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    except (OSError, AttributeError, ImportError):  # pragma: no cover (not glibc)
        return
    current = libc.signal(signum, None)  # SIG_DFL for a moment, giving back Python's handler
    libc.sysv_signal(signum, current)


def handle(signum: int, frame: object) -> None:
    """The Python handler of SIGINT and SIGTERM: tell the watchdog, raise ``Interrupted``."""
    _state["last"] = signum
    _state["received"] = True
    if _state["watching"]:
        signal.signal(signum, handle)  # one-shot again for the next signal
        _reset_after_first(signum)
    _tell(b"h")
    raise Interrupted(signum)


def _watch(parent: int, wake: int, news: int) -> None:
    """The watchdog process's loop (see the module docstring); returns when the parent is gone."""
    temporaries: set[bytes] = set()
    pending_since, last, buffer = None, int(signal.SIGINT), b""
    os.set_blocking(wake, False)
    while True:
        timeout = None
        if pending_since is not None:
            timeout = max(0.0, pending_since + GRACE_SECONDS - time.monotonic())
        select.select([wake, news], [], [], timeout)
        with contextlib.suppress(BlockingIOError):  # the wake-ups first: they were sent first
            for signum in os.read(wake, 256):
                if signum in SIGNALS:
                    last = signum
                    pending_since = pending_since or time.monotonic()
        readable, _, _ = select.select([news], [], [], 0)
        if readable:
            data = os.read(news, 65536)
            if not data:
                return  # the command ended
            *messages, buffer = (buffer + data).split(b"\0")
            for message in messages:
                if message == b"h":
                    pending_since = None
                elif message[:1] == b"+":
                    temporaries.add(message[1:])
                elif message[:1] == b"-":
                    temporaries.discard(message[1:])
        if pending_since is not None and time.monotonic() >= pending_since + GRACE_SECONDS:
            for name in temporaries:
                with contextlib.suppress(OSError):
                    os.unlink(name)
            os.write(2, b"headlab: aborted\n")
            with contextlib.suppress(ProcessLookupError):
                os.kill(parent, last)  # its handler was reset by the first delivery: it ends
                time.sleep(2.0)
                os.kill(parent, signal.SIGKILL)
            return


def _start_watchdog() -> None:
    parent = os.getpid()
    wake_read, wake_write = os.pipe()
    news_read, news_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watchdog: ignores the signals it watches for, never returns to the caller
        try:
            for signum in SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            os.close(wake_write)
            os.close(news_write)
            _watch(parent, wake_read, news_read)
        finally:
            os._exit(0)
    os.close(wake_read)
    os.close(news_read)
    os.set_blocking(wake_write, False)
    os.set_inheritable(news_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    _state["news"] = news_write
    _state["watching"] = True
    for signum in SIGNALS:
        _reset_after_first(signum)


def received() -> bool:
    """Whether SIGINT or SIGTERM reached ``handle`` since ``install``: then any error that follows
    is the interrupt's (an import cut by it fails again as an ImportError: numpy's extension
    refuses to load twice), and the command ends as interrupted."""
    return bool(_state["received"])


def install(watch: bool = True) -> None:
    """Handle SIGINT and SIGTERM as described in the module docstring; ``watch`` starts the
    watchdog (main thread only; once per process)."""
    _state["last"] = int(signal.SIGINT)
    _state["received"] = False
    for signum in SIGNALS:
        signal.signal(signum, handle)
    if watch and not _state["watching"] and threading.current_thread() is threading.main_thread():
        _start_watchdog()


def ignore() -> None:
    """After the command: a signal during interpreter exit changes nothing."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
