"""``headlab grad``: gradient coupling between head blocks."""

from __future__ import annotations

import typer

from headlab.cli.outputs import print_json
from headlab.cli.parsing import flags
from headlab.cli.setup_options import (
    AS_JSON,
    BATCH,
    HEAD_DIM,
    KV_HEADS,
    SEED,
    SEQ,
    SETUP_FLAGS,
    VS_HEADS,
)
from headlab.cli.tables import fitted_tables
from headlab.results.defaults import INITS


def grad(
    d_model: int = typer.Option(64, "--d-model", help="Model width E (d_model)."),
    heads: int = typer.Option(8, "--heads", help="Head count of the first side."),
    vs_heads: int | None = VS_HEADS,
    seq_len: int = SEQ,
    batch: int = BATCH,
    init: str = typer.Option("normal", "--init", help=f"Weight draw: {', '.join(INITS)}."),
    seed: int = SEED,
    kv_heads: int | None = KV_HEADS,
    head_dim: int | None = HEAD_DIM,
    talking_heads: float = typer.Option(
        0.0,
        "--talking-heads",
        help="Make the first side talking heads (Shazeer et al. 2020) with mixing "
        "identity + this * N(0, 1); 0 (default) is plain multi-head attention.",
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Gradient coupling between head blocks, for h heads and for the same weights as vs-heads.

    Entry (i, j): how much block i's W_Q/W_K/W_V gradient changes when only the upstream gradient
    of output block j changes. Zero off the diagonal means the heads are optimised separately.
    """
    from rich.console import Console

    from headlab.analysis.grad import coupling_comparison
    from headlab.analysis.scenarios import CompareRequest

    with flags(*SETUP_FLAGS):
        setup = CompareRequest(
            d_model=d_model,
            heads=heads,
            vs_heads=vs_heads,
            seq_len=seq_len,
            batch=batch,
            init=init,
            seed=seed,
            output_projection=True,
            kv_heads=kv_heads,
            head_dim=head_dim,
        )
        result = coupling_comparison(setup, talking_heads)
    if as_json:
        print_json(result.to_dict(), indent=2)
        return
    console = Console()
    blocks = result.blocks
    for side in result.sides:
        title = (
            f"{side.num_heads} head(s){side.kind}: coupling of {blocks} blocks "
            f"(off-diagonal max {side.off_diagonal_max:.3g})"
        )
        columns = ["block i \\ changed j", *map(str, range(blocks))]
        rows = [[str(i), *(f"{v:.3g}" for v in row)] for i, row in enumerate(side.coupling)]
        console.print(*fitted_tables(title, columns, rows))
        norms = side.head_gradient_norms
        console.print(
            "per-head gradient norms  W_Q: "
            + " ".join(f"{v:.3g}" for v in norms["w_q"])
            + "   W_O: "
            + " ".join(f"{v:.3g}" for v in norms["w_o"]),
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add this command to ``app`` (``headlab.cli.app``)."""
    app.command()(grad)
