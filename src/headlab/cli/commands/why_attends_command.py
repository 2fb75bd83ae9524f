"""``headlab why-attends``: why a head puts its weight on a key, every score split exactly into
what the query side and the key side read.

Parses and checks before the model loads (--keys, k >= 1, --layer/--head not negative, a key
position after a query in a causal model, read from the model's config alone, the output
paths), loads, checks what needs the model (the layer and
head against its sizes, the query positions against the text's tokens, a pattern that names no
key), then calls ``headlab.circuits.score_split`` and prints one table per pair.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from headlab.cli.model_kinds import IMAGE
from headlab.cli.model_source import ModelChoice, model_source, open_model
from headlab.cli.outputs import AS_JSON, FORCE, claim, write_outputs
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import RESULTS_DIR

OUT = typer.Option(RESULTS_DIR / "why_attends.json", "--out", help="Results file (JSON).")
FIGURE = typer.Option(
    None, "--figure", help="Write the pair heatmap, marginals and source tokens (PNG)."
)
TEXT = "The cat sat on the mat. The dog ran in the park. The cat sat on the mat. The dog ran"
#: Pairs printed as tables (the results file holds them all).
PRINTED = 3
#: Components per printed table.
ROWS = 8


def _checked(
    layer: int, head: int, queries: list[int], keys: str, source: ModelChoice | None, quiet: bool
):
    from headlab.circuits.score_keys import KeySpec, check_key

    with flags("keys"):
        spec = KeySpec.parse(keys)
    for value, flag in ((layer, "--layer"), (head, "--head")):
        if value < 0:
            raise ValueError(f"{flag} must be >= 0, got {value}")
    if spec.kind == "position" and any(0 <= q < spec.count for q in queries):
        # an encoder's query sees keys after it; a decoder's (source None: an encoder-decoder's
        # decoder) does not
        causal = True if source is None else _causal(source, quiet)
        for query in queries:
            if query >= 0:
                check_key(query, spec.count, max(query, spec.count) + 1, causal=causal)
    return spec


def _causal(source: ModelChoice, quiet: bool) -> bool:
    """Whether the chosen model is causal, from its config alone (no weight loads)."""
    from headlab.cli.model_source import model_outline

    return model_outline(source, quiet=quiet, kind_checked=False).causal


def _encoder_decoder(source: ModelChoice) -> None:
    """ValueError (one line, from the config alone) unless the model is an encoder-decoder whose
    decoder the split reads (``seq2seq_view.ROW_FAMILIES``: T5)."""
    from headlab.cli.model_kinds import declared
    from headlab.models.hf.checkpoint import declared_config
    from headlab.models.hf.seq2seq_view import ROW_FAMILIES

    with flags("model", "download"):
        kind, name, _ = declared(source)
        family = str((declared_config(source.name_or_path) or {}).get("model_type", ""))
    if kind != "encoder-decoder" or family not in ROW_FAMILIES:
        raise ValueError(
            f"--source-text needs an encoder-decoder of family {', '.join(sorted(ROW_FAMILIES))}"
            f", got {name} ({kind}, family {family!r})"
        )


def _opened(source: ModelChoice, text: str, source_text: str | None, quiet: bool):
    """(the model the split runs, the text's ids, its tokens, heads per layer): the model
    itself, or an encoder-decoder's decoder stream reading ``source_text``."""
    if source_text is None:
        loaded = open_model(source, quiet=quiet)
        ids = loaded.encode(text)
        return loaded, ids, [loaded.decode([t]) for t in ids], loaded.heads_per_layer
    from headlab.cli.model_kinds import open_kind
    from headlab.models.hf.seq2seq_view import DecoderStream

    model = open_kind(source, "encoder-decoder", quiet)
    target = model.target_texts([text])
    view = DecoderStream(model, model.source_texts([source_text]))
    ids = target.input_ids[0].tolist()
    return view, ids, list(target.tokens[0]), model.heads_per_layer("decoder")


@model_source(folder=True, backend=False)
def why_attends(
    layer: int = typer.Option(..., "--layer", help="The head's layer (from 0)."),
    head: int = typer.Option(..., "--head", help="The query head within the layer (from 0)."),
    text: str | None = typer.Option(
        None, "--text", help="The text the head reads [default: a short text with repeats]."
    ),
    query: str | None = typer.Option(
        None,
        "--query",
        help="Query positions, comma-separated (negative: from the end) [default: -1; an "
        "image: cls, or patch-N].",
    ),
    keys: str = typer.Option(
        "attended",
        "--keys",
        help="attended, top-K, induction, previous, bos, self, all or a key position; an "
        "image: attended, top-K, all, self, cls, registers, patch-N or a position.",
    ),
    sources: int = typer.Option(
        3, "--sources", help="Head components whose key side is split by source position."
    ),
    recompute: bool = typer.Option(
        False, "--recompute", help="Also each key-side term with the norms recomputed."
    ),
    source_text: str | None = typer.Option(
        None,
        "--source-text",
        help="For an encoder-decoder (T5): its source; --text is then the decoder's text, and "
        "--layer a decoder block, whose self-attention is split.",
    ),
    image: Path | None = IMAGE,
    source: ModelChoice = None,  # the model-source options (``model_source``)
    out: Path = OUT,
    figure: Path | None = FIGURE,
    force: bool = FORCE,
    as_json: bool = AS_JSON,
) -> None:
    """Split a head's scores exactly into query-side x key-side components.

    Each pre-softmax score of the head is split, with the norms held at the run's scales, into
    a pair matrix over the components that wrote the query's and the key's residual stream
    (embeddings, earlier heads through W_O, MLPs, biases), its two marginals, and the key side
    of the strongest head components split by the source token they read. With --image
    (ViT, DINOv2, CLIP's vision tower): the image's class token, registers and patches.
    """
    if image is not None:
        from headlab.cli.why_attends_image import image_split

        given = {"--text": text, "--source-text": source_text}
        result = image_split(
            source,
            image,
            layer=layer,
            head=head,
            query=query,
            keys=keys,
            sources=sources,
            recompute=recompute,
            text_options=[flag for flag, value in given.items() if value is not None],
            claim=lambda: claim("why-attends", out, force=force, figure=figure),
            quiet=as_json,
        )
        _written(result, out, figure, force, as_json)
        return
    from headlab.cli.why_attends_image import refuse_images_elsewhere

    refuse_images_elsewhere(source)
    text = TEXT if text is None else text
    queries = int_list("-1" if query is None else query, "--query", low=None)
    if queries is None:
        raise ValueError("--query takes at least one position, got none")
    if sources < 0:
        raise ValueError(f"--sources must be >= 0, got {sources}")
    if source_text is not None:
        _encoder_decoder(source)
    decoder_only = source_text is not None  # an encoder-decoder's decoder: causal
    spec = _checked(layer, head, queries, keys, None if decoder_only else source, as_json)
    claim("why-attends", out, force=force, figure=figure)
    loaded, ids, tokens, shapes = _opened(source, text, source_text, as_json)
    if layer >= len(shapes):
        raise ValueError(f"--layer must lie in 0..{len(shapes) - 1} ({loaded.name}), got {layer}")
    if head >= shapes[layer]:
        raise ValueError(f"--head must lie in 0..{shapes[layer] - 1} (layer {layer}), got {head}")
    positions = [q + len(ids) if q < 0 else q for q in queries]
    bad = [q for q, p in zip(queries, positions, strict=True) if not 0 <= p < len(ids)]
    if bad:
        raise ValueError(
            f"--query must lie in -{len(ids)}..{len(ids) - 1} (the text's "
            f"{len(ids)} tokens), got {bad[0]}"
        )
    import torch

    from headlab.circuits.score_keys import keys_for
    from headlab.circuits.score_sides import Sides
    from headlab.circuits.score_split import split_scores

    if not spec.needs_scores():
        with flags("keys"):
            for p in positions:
                keys_for(spec, ids, p, causal=loaded.causal)
    with (
        progress(
            "why-attends: one run of the model, then the split", None, quiet=as_json
        ) as update,
        torch.no_grad(),
    ):
        sides = Sides(loaded, torch.tensor([ids]))
        with flags("keys"):
            result = split_scores(
                sides,
                layer,
                head,
                positions,
                spec,
                sources=sources,
                recompute=recompute,
                tokens=tokens,
                progress=update,
            )
    _written(result, out, figure, force, as_json)


def _written(result, out: Path, figure: Path | None, force: bool, as_json: bool) -> None:
    """The results file, the figure, and the tables (none with --json)."""
    from headlab.report.score_split_figures import score_split_figure

    written = write_outputs(
        "why-attends",
        result,
        out,
        figure=figure,
        draw=score_split_figure,
        force=force,
        as_json=as_json,
    )
    if written is None:
        return
    _print(result)
    print(f"wrote {out}")
    if figure is not None:
        print(f"wrote {figure}")


def _print(result) -> None:
    console = Console()
    tokens = result.tokens[0]
    for pair in result.pairs[:PRINTED]:
        score = "" if pair.score is None else f"score {pair.score:.4g} = "
        cap = f" {pair.softcap_term:+.3g} soft-cap" if pair.softcap_term else ""
        shown = pair.bias_term and abs(pair.bias_term) > 1e-4 * max(1.0, abs(pair.raw))
        bias = f" {pair.bias_term:+.3g} bias" if shown else ""  # else: the float's rounding
        title = (
            f"{result.layer}.{result.head}: query {pair.query} {tokens[pair.query]!r} -> "
            f"key {pair.key} {tokens[pair.key]!r}: {score}{pair.raw:.4g} q.k{cap}{bias}"
        )
        order = sorted(range(len(result.components)), key=lambda c: -abs(pair.key_marginal[c]))[
            :ROWS
        ]
        rows = [
            [result.components[c], f"{pair.key_marginal[c]:+.4g}", f"{pair.query_marginal[c]:+.4g}"]
            for c in order
        ]
        for table in fitted_tables(
            title, ["component", "key side", "query side"], rows, left=["component"]
        ):
            console.print(table)
        for split in pair.sources[:1]:
            top = sorted(zip(split.positions, split.values, strict=True), key=lambda x: -x[1])
            said = ", ".join(f"{p} {tokens[p]!r} {v:+.3g}" for p, v in top[:3])
            console.print(Text(f"{split.component}'s key side by source: {said}"))
    more = len(result.pairs) - PRINTED
    if more > 0:
        console.print(Text(f"... and {more} more pairs in the results file"))
    console.print(
        Text(
            "key side: what the key position's stream holds; query side: the "
            "query's; each sums to q.k (norms held at the run's scales)"
        )
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command(name="why-attends")(why_attends)
