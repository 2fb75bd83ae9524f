"""``headlab compare`` (the main job): the seed questions, measured."""

from __future__ import annotations

import typer

from headlab.cli.outputs import print_json
from headlab.cli.parsing import flags
from headlab.cli.setup_options import (
    AS_JSON,
    BATCH,
    CAUSAL,
    D_MODEL,
    HEAD_DIM,
    HEADS,
    INIT,
    KV_HEADS,
    OUT_PROJ,
    SEED,
    SEQ,
    SETUP_FLAGS,
    VS_HEADS,
)


def compare(
    d_model: int = D_MODEL,
    heads: int = HEADS,
    vs_heads: int | None = VS_HEADS,
    seq_len: int = SEQ,
    batch: int = BATCH,
    init: str = INIT,
    seed: int = SEED,
    output_projection: bool = OUT_PROJ,
    causal: bool = CAUSAL,
    kv_heads: int | None = KV_HEADS,
    head_dim: int | None = HEAD_DIM,
    as_json: bool = AS_JSON,
) -> None:
    """Compare h heads with the same weights viewed as another head count, and say why.

    With no options: the first seed question (8 heads against 1, d_model 512, torch.rand
    weights and input, no output projection).
    """
    from rich.console import Console
    from rich.table import Table

    from headlab.analysis.explain import explain
    from headlab.analysis.scenarios import CompareRequest, run_setup

    with flags(*SETUP_FLAGS):
        setup = CompareRequest(
            d_model=d_model,
            heads=heads,
            vs_heads=vs_heads,
            seq_len=seq_len,
            batch=batch,
            init=init,
            seed=seed,
            output_projection=output_projection,
            causal=causal,
            kv_heads=kv_heads,
            head_dim=head_dim,
        )
        result = run_setup(setup).result()
    if as_json:
        print_json(result.to_dict(), indent=2)
        return
    console = Console()
    console.print(
        f"[bold]verdict:[/bold] {result.verdict}   "
        f"(max |diff| {result.max_abs_diff:.3g}, relative {result.rel_diff:.3g}, "
        f"gradients equal: {result.gradients_equal})"
    )
    table = Table(title="findings (share of query rows each explains)")
    table.add_column("code")
    table.add_column("rows", justify="right")
    table.add_column("detail", overflow="fold")
    for f in result.findings:
        table.add_row(f.code, f"{f.fraction:.0%}", f.detail)
    console.print(table)
    console.print(explain(result, findings=False), highlight=False)  # findings: the table


def register(app: typer.Typer) -> None:
    """Add this command to ``app`` (``headlab.cli.app``)."""
    app.command()(compare)
