"""Entry point of the ``headlab`` command: builds the app and turns errors into one line, exit 2."""

from __future__ import annotations

import sys

import click

from headlab.cli.app import app


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Bad input (ValueError, usage errors) prints one line on stderr and exits 2."""
    try:
        app(args=argv, prog_name="headlab", standalone_mode=False)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except click.exceptions.Abort:
        print("headlab: aborted", file=sys.stderr)
        sys.exit(130)
    except click.exceptions.ClickException as error:
        message = error.format_message().replace("\n", " ")
        print(f"headlab: error: {message}", file=sys.stderr)
        sys.exit(2)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        message = str(error).replace("\n", " ")
        print(f"headlab: error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
