"""``headlab compare`` (the main job) and ``headlab grad``: the seed questions, measured."""

from __future__ import annotations

import typer

from headlab.cli.outputs import print_json
from headlab.cli.parsing import flags
from headlab.cli.tables import fitted_tables
from headlab.results.defaults import INITS

_D_MODEL = typer.Option(512, "--d-model", help="Model width E (d_model).")
_HEADS = typer.Option(8, "--heads", help="Head count of the first side.")
_VS_HEADS = typer.Option(
    None,
    "--vs-heads",
    help="Head count of the same weights on the other side [default: 1; with --kv-heads, the "
    "fewest that split the K/V width].",
)
_SEQ = typer.Option(10, "--seq-len", help="Sequence length.")
_BATCH = typer.Option(2, "--batch", help="Batch size.")
_INIT = typer.Option("rand", "--init", help=f"Weight draw: {', '.join(INITS)}.")
_SEED = typer.Option(0, "--seed", help="Seed of the weights and the input.")
_OUT_PROJ = typer.Option(
    False,
    "--output-projection",
    help="Use a drawn W_O and biases (default: none, as in the first seed question).",
)
_CAUSAL = typer.Option(False, "--causal", help="Causal mask.")
_KV_HEADS = typer.Option(
    None, "--kv-heads", help="K/V heads of the first side (GQA; 1 = MQA) [default: --heads]."
)
_HEAD_DIM = typer.Option(
    None, "--head-dim", help="Head size of the first side [default: d_model / heads]."
)
_JSON = typer.Option(False, "--json", help="Print the JSON document only.")
# CompareSetup's arguments, which its errors name, are these commands' flags
_FLAGS = ("d_model", "heads", "vs_heads", "seq_len", "batch", "init", "seed", "kv_heads",
          "head_dim", "output_projection", "talking_heads")  # fmt: skip


def compare(
    d_model: int = _D_MODEL,
    heads: int = _HEADS,
    vs_heads: int | None = _VS_HEADS,
    seq_len: int = _SEQ,
    batch: int = _BATCH,
    init: str = _INIT,
    seed: int = _SEED,
    output_projection: bool = _OUT_PROJ,
    causal: bool = _CAUSAL,
    kv_heads: int | None = _KV_HEADS,
    head_dim: int | None = _HEAD_DIM,
    as_json: bool = _JSON,
) -> None:
    """Compare h heads with the same weights viewed as another head count, and say why.

    With no options: the first seed question (8 heads against 1, d_model 512, torch.rand
    weights and input, no output projection).
    """
    from rich.console import Console
    from rich.table import Table

    from headlab.analysis.explain import explain
    from headlab.analysis.scenarios import CompareSetup, run_setup

    with flags(*_FLAGS):
        setup = CompareSetup(
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
        comparison = run_setup(setup)
    if as_json:
        print_json(comparison.to_dict(), indent=2)
        return
    console = Console()
    console.print(
        f"[bold]verdict:[/bold] {comparison.verdict}   "
        f"(max |diff| {comparison.max_abs_diff:.3g}, relative {comparison.rel_diff:.3g}, "
        f"gradients equal: {comparison.gradients_equal})"
    )
    table = Table(title="findings (share of query rows each explains)")
    table.add_column("code")
    table.add_column("rows", justify="right")
    table.add_column("detail", overflow="fold")
    for f in comparison.findings:
        table.add_row(f.code, f"{f.fraction:.0%}", f.detail)
    console.print(table)
    console.print(explain(comparison, findings=False), highlight=False)  # findings: the table


def grad(
    d_model: int = typer.Option(64, "--d-model", help="Model width E (d_model)."),
    heads: int = typer.Option(8, "--heads", help="Head count of the first side."),
    vs_heads: int | None = _VS_HEADS,
    seq_len: int = _SEQ,
    batch: int = _BATCH,
    init: str = typer.Option("normal", "--init", help=f"Weight draw: {', '.join(INITS)}."),
    seed: int = _SEED,
    kv_heads: int | None = _KV_HEADS,
    head_dim: int | None = _HEAD_DIM,
    talking_heads: float = typer.Option(
        0.0,
        "--talking-heads",
        help="Make the first side talking heads (Shazeer et al. 2020) with mixing "
        "identity + this * N(0, 1); 0 (default) is plain multi-head attention.",
    ),
    as_json: bool = _JSON,
) -> None:
    """Gradient coupling between head blocks, for h heads and for the same weights as vs-heads.

    Entry (i, j): how much block i's W_Q/W_K/W_V gradient changes when only the upstream gradient
    of output block j changes. Zero off the diagonal means the heads are optimised separately.
    """
    from rich.console import Console

    from headlab.analysis.grad import coupling_comparison
    from headlab.analysis.scenarios import CompareSetup

    with flags(*_FLAGS):
        setup = CompareSetup(
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
        doc = coupling_comparison(setup, talking_heads).to_dict()
    blocks = doc["blocks"]
    if as_json:
        print_json(doc, indent=2)
        return
    console = Console()
    for side in doc["sides"]:
        title = (
            f"{side['num_heads']} head(s){side['kind']}: coupling of {blocks} blocks "
            f"(off-diagonal max {side['off_diagonal_max']:.3g})"
        )
        columns = ["block i \\ changed j", *map(str, range(blocks))]
        rows = [[str(i), *(f"{v:.3g}" for v in row)] for i, row in enumerate(side["coupling"])]
        console.print(*fitted_tables(title, columns, rows))
        norms = side["head_gradient_norms"]
        console.print(
            "per-head gradient norms  W_Q: "
            + " ".join(f"{v:.3g}" for v in norms["w_q"])
            + "   W_O: "
            + " ".join(f"{v:.3g}" for v in norms["w_o"]),
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command()(compare)
    app.command()(grad)
