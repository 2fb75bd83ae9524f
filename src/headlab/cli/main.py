"""Entry point of the ``headlab`` command: errors become one line on stderr, never a traceback.

Bad input (ValueError and the other errors below) exits 2; Ctrl-C exits 130 and SIGTERM 143, at
any point: during the imports (which is why they happen inside ``main``), and inside a call that
never returns to Python (``headlab.results.interrupts``); an OSError while reading or writing
(a full disk, a permission) and a sweep whose worker died exit 1. Library warnings (a skipped
results line) are one line each: ``headlab: warning: ...``.
"""

from __future__ import annotations

import sys
import warnings

from headlab.results import interrupts


def _say(kind: str, message: str) -> None:
    print(f"headlab: {kind}: {' '.join(str(message).split())}", file=sys.stderr)


def _fail(message: str, code: int = 2) -> None:
    _say("error", message)
    sys.exit(code)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    _say("warning", str(message))


def _os_error(error: OSError) -> str:
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


def _check_arguments(argv: list[str]) -> None:
    """Arguments that are not valid UTF-8 (Python keeps their bytes as surrogates): one line
    naming the option they belong to, instead of an encoding error deep inside a command."""
    for i, arg in enumerate(argv):
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            owner = argv[i - 1] if i and argv[i - 1].startswith("-") else f"argument {i + 1}"
            if arg.startswith("-"):
                owner = arg.split("=", 1)[0]
            _fail(f"{owner}: expected UTF-8 text, got undecodable bytes")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI (see the module docstring for exit codes)."""
    # The real command gets the watchdog: a stuck call cannot hold a signal back.
    interrupts.install(watch=argv is None)
    _check_arguments(sys.argv[1:] if argv is None else argv)
    with warnings.catch_warnings():
        from headlab.notices import HeadlabWarning

        warnings.filterwarnings("always", category=HeadlabWarning)
        warnings.showwarning = _show_warning
        _run(argv)
    if argv is None:  # the real command, done: a Ctrl-C during interpreter exit changes nothing
        interrupts.ignore()


def _run(argv: list[str] | None) -> None:
    try:
        from headlab.cli.app import app
        from headlab.results.output_policy import new_command

        # standalone_mode=False *returns* typer.Exit's code (130 for Ctrl-C) instead of exiting.
        with new_command():  # the inputs its options declare are this command's alone
            code = app(args=argv, prog_name="headlab", standalone_mode=False)
    except KeyboardInterrupt:
        print("headlab: aborted", file=sys.stderr)
        sys.exit(interrupts.exit_code())
    except SystemExit:
        raise
    except Exception as error:
        if interrupts.received():  # the interrupt surfaced as another error (a cut import)
            print("headlab: aborted", file=sys.stderr)
            sys.exit(interrupts.exit_code())
        _handle(error)
    else:
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            if code == 130:  # typer caught the Ctrl-C (or SIGTERM) itself
                print("headlab: aborted", file=sys.stderr)
                code = interrupts.exit_code()
            sys.exit(code)


def _handle(error: Exception) -> None:
    import typer

    if isinstance(error, typer.Exit):
        sys.exit(error.exit_code)
    if isinstance(error, typer.Abort):
        print("headlab: aborted", file=sys.stderr)
        sys.exit(interrupts.exit_code())
    if type(error).__name__ == "NoArgsIsHelpError":  # bare `headlab` or `headlab model`
        help_text = error.format_message()  # typer's rich help has printed itself already
        if help_text.strip():
            print(help_text)
        sys.exit(0)
    if isinstance(error, typer.TyperException):  # usage errors (unknown option, bad value)
        format_message = getattr(error, "format_message", None)
        _fail(format_message() if format_message else str(error))
    if isinstance(error, UnicodeDecodeError):
        _fail(f"expected UTF-8 text, got undecodable bytes ({error.reason} at byte {error.start})")
    if isinstance(error, ValueError | FileExistsError | FileNotFoundError | NotADirectoryError):
        _fail(str(error))
    if isinstance(error, OverflowError):
        _fail(f"a number is too large: {error}")
    # Only a sweep raises WorkerDied, and then its module is loaded: importing it here would import
    # torch again after an interrupted first import (numpy then refuses to load twice).
    executors = sys.modules.get("headlab.experiments.executors")
    if executors is not None and isinstance(error, executors.WorkerDied):
        _fail(str(error), code=1)
    if isinstance(error, OSError):
        _fail(_os_error(error), code=1)
    raise error


if __name__ == "__main__":  # pragma: no cover
    main()
