"""A command's output files: checked before the work, written after it, refusals naming flags.

The library's writers name the path by its argument (``path=results.json exists ...; pass
force=True``); here those names become the command's flags (``--out``, ``--figure``, ``--force``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import typer
from rich.text import Text

from headlab.cli.parsing import flags

R = TypeVar("R")
T = TypeVar("T")

# The output options of the commands that write through ``write_outputs``.
FIGURE = typer.Option(None, "--figure", help="Write the figure (PNG).")
FORCE_HELP = (
    "Also replace headlab's own output of another kind (never a file headlab did not write, "
    "nor an input of the command)."
)
FORCE = typer.Option(False, "--force", help=FORCE_HELP)
AS_JSON = typer.Option(False, "--json", help="Print the results document as JSON.")


def an_input(value: T) -> T:
    """Typer callback of an input option (a file the command reads): from now on, the output
    policy refuses to write over it, even with --force."""
    from headlab.results.output_policy import declare_input

    declare_input(value)
    return value


def an_input_folder(value: T) -> T:
    """Typer callback of an input folder whose files the command reads: no output inside it."""
    from headlab.results.output_policy import declare_input

    declare_input(value, folder=True)
    return value


def print_json(document: object, *, indent: int = 1, ensure_ascii: bool = True) -> None:
    """Print ``document`` as strict JSON, the one printer of every ``--json``. JSON has no NaN or
    Infinity: a document holding one (an overflow) is refused, naming where, instead of
    printing what no JSON reader accepts."""
    import json

    place = non_finite(document)
    if place is not None:
        raise ValueError(
            f"the result is not a finite number at {place or 'the top'} (an overflow); "
            "JSON has no NaN or Infinity, so nothing was printed"
        )
    print(json.dumps(document, indent=indent, ensure_ascii=ensure_ascii, allow_nan=False))


def non_finite(value: object, where: str = "") -> str | None:
    """Where in ``value`` (``sides[0].coupling[1][2]``) the first NaN or infinity is; None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list | tuple)
        else ()
    )
    for key, item in items:
        place = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip(".")
        found = non_finite(item, place)
        if found is not None:
            return found
    return None


@contextmanager
def writing(flag: str) -> Iterator[None]:
    """Within this block, a library writer's ``path`` is ``flag`` and ``force=True`` is --force."""
    with flags("force", path=flag):
        yield


def claim(
    name: str, out: Path, *, force: bool, figure: Path | None = None, out_flag: str = "--out"
) -> None:
    """Check ``out`` (headlab ``name`` results, JSON; given as ``out_flag``) and --figure (its
    PNG) before any work starts; the writers check them again when they write. OutputRefused
    names the flag."""
    from headlab.results.output_policy import Kind, OutputRefused, check_output

    with writing(out_flag):
        check_output(out, Kind.json(name), force=force)
    if figure is None:
        return
    if Path(os.path.abspath(figure)) == Path(os.path.abspath(out)):
        raise OutputRefused(f"--figure and {out_flag} must be different files, got {out} twice")
    with writing("--figure"):
        check_output(figure, Kind.png(name), force=force)


def write_outputs(
    name: str,
    result: R,
    out: Path,
    *,
    figure: Path | None,
    draw: Callable[[R], object],
    force: bool,
    as_json: bool,
    out_flag: str = "--out",
) -> dict | None:
    """After the work: ``result`` to ``out`` (headlab ``name`` results; given as ``out_flag``),
    ``draw(result)`` to --figure when asked. With --json, print the document and return None
    (the command prints nothing more); else return the document written."""
    from headlab.report.png_files import save_figure
    from headlab.results.json_store import write_result
    from headlab.results.output_policy import Kind

    with writing(out_flag):
        written = write_result(out, result, force=force)
    if figure is not None:
        with writing("--figure"):
            save_figure(draw(result), figure, Kind.png(name), force=force)
    if as_json:
        print_json(written)
        return None
    return written


def emit_result(
    result, out: Path, force: bool, as_json: bool, tables: list, out_flag: str = "--out"
) -> None:
    """``result`` (a results type: its KIND tags the file) to ``out`` (given as ``out_flag``)
    as ``write_outputs`` writes it, then its ``tables`` (rich renderables) and where it went;
    with --json only the document."""
    from rich.console import Console

    written = write_outputs(
        result.KIND,
        result,
        out,
        figure=None,
        draw=lambda r: None,
        force=force,
        as_json=as_json,
        out_flag=out_flag,
    )
    if written is None:
        return
    console = Console()
    for table in tables:
        console.print(table)
    print(f"wrote {out}")


def note_lines(notes: list[str]) -> list[Text]:
    """A result's notes (what was left out and why), one line each, under its tables."""
    return [Text(f"note: {note}") for note in notes]
