"""The typer application; command modules register themselves on it when imported below."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="headlab",
    help="Exact, fast and inspectable multi-head attention, and measured answers about heads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Exact, fast and inspectable multi-head attention, and measured answers about heads."""


# Command modules: each adds its commands to ``app``. Imported last, for their side effect.
from headlab.cli import compare as _compare  # noqa: E402,F401
from headlab.cli import expressivity as _expressivity  # noqa: E402,F401
from headlab.cli import model as _model  # noqa: E402,F401
from headlab.cli import params as _params  # noqa: E402,F401
from headlab.cli import redundancy as _redundancy  # noqa: E402,F401
from headlab.cli import report as _report  # noqa: E402,F401
from headlab.cli import specialisation as _specialisation  # noqa: E402,F401
from headlab.cli import sweep as _sweep  # noqa: E402,F401
