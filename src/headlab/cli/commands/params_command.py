"""``headlab params``: the parameter table over head counts and K/V head counts."""

from __future__ import annotations

import typer

from headlab.cli.outputs import print_json
from headlab.cli.parsing import flags, int_list
from headlab.cli.tables import fitted_tables


def params(
    d_model: int = typer.Option(512, "--d-model", help="Model width E."),
    heads: str = typer.Option("1,2,4,8,16", "--heads", help="Head counts, comma separated."),
    kv_heads: str = typer.Option(
        "", "--kv-heads", help="K/V head counts (GQA; 1 = MQA), comma separated."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON rows only."),
) -> None:
    """Show that the parameter count does not depend on the number of heads (and what GQA saves)."""
    from rich.console import Console

    from headlab.analysis.params import parameter_table

    head_counts = int_list(heads, "--heads")
    with flags("d_model", "heads", "kv_heads"):
        rows = parameter_table(d_model, head_counts, int_list(kv_heads, "--kv-heads"))
    if as_json:
        print_json([r.to_dict() for r in rows], indent=2)
        return
    columns = ["heads", "kv heads", "head dim", "W_Q+b", "W_K,W_V+b", "W_O+b", "total", "saved"]
    cells = [
        [
            str(v)
            for v in (
                r.num_heads,
                r.num_kv_heads,
                r.head_dim,
                r.q_proj,
                r.kv_proj,
                r.out_proj,
                r.total,
                r.saved_vs_full_mha,
            )
        ]
        for r in rows
    ]
    title = f"Parameters of one attention layer, d_model={d_model}"
    Console().print(*fitted_tables(title, columns, cells, keys=2))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(params)
