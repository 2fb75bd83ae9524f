"""Entry point of the ``headlab`` command: builds the app and turns errors into one line, exit 2."""

from __future__ import annotations

import sys

import typer

from headlab.cli.app import app


def _fail(message: str) -> None:
    print(f"headlab: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Bad input (ValueError, usage errors) prints one line on stderr and exits 2."""
    try:
        # standalone_mode=False *returns* typer.Exit's code (130 for Ctrl-C) instead of exiting.
        code = app(args=argv, prog_name="headlab", standalone_mode=False)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("headlab: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as error:  # typer's usage errors (unknown option, bad value)
        format_message = getattr(error, "format_message", None)
        _fail(format_message() if format_message else str(error))
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as error:
        _fail(str(error))
    else:
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
