"""The options of ``headlab compare`` and ``headlab grad``: the fields of the library's
``CompareRequest`` (its errors name them; ``SETUP_FLAGS`` maps them to these options)."""

from __future__ import annotations

import typer

from headlab.results.defaults import INITS

D_MODEL = typer.Option(512, "--d-model", help="Model width E (d_model).")
HEADS = typer.Option(8, "--heads", help="Head count of the first side.")
VS_HEADS = typer.Option(
    None,
    "--vs-heads",
    help="Head count of the same weights on the other side [default: 1; with --kv-heads, the "
    "fewest that split the K/V width].",
)
SEQ = typer.Option(10, "--seq-len", help="Sequence length.")
BATCH = typer.Option(2, "--batch", help="Batch size.")
INIT = typer.Option("rand", "--init", help=f"Weight draw: {', '.join(INITS)}.")
SEED = typer.Option(0, "--seed", help="Seed of the weights and the input.")
OUT_PROJ = typer.Option(
    False,
    "--output-projection",
    help="Use a drawn W_O and biases (default: none, as in the first seed question).",
)
CAUSAL = typer.Option(False, "--causal", help="Causal mask.")
KV_HEADS = typer.Option(
    None, "--kv-heads", help="K/V heads of the first side (GQA; 1 = MQA) [default: --heads]."
)
HEAD_DIM = typer.Option(
    None, "--head-dim", help="Head size of the first side [default: d_model / heads]."
)
AS_JSON = typer.Option(False, "--json", help="Print the JSON document only.")
# CompareRequest's arguments, which its errors name, are these commands' flags
SETUP_FLAGS = (
    "d_model",
    "heads",
    "vs_heads",
    "seq_len",
    "batch",
    "init",
    "seed",
    "kv_heads",
    "head_dim",
    "output_projection",
    "talking_heads",
)
