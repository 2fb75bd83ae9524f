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

from headlab.cli.model_kinds import AUDIO, IMAGE
from headlab.cli.model_source import ModelChoice, model_source, open_model
from headlab.cli.outputs import AS_JSON, FORCE, an_input, claim, write_outputs
from headlab.cli.parsing import flags, int_list
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import RESULTS_DIR

OUT = typer.Option(
    None,
    "--out",
    help="Results file (JSON) [default: why_attends.json, or why_attends_all_queries.json "
    "with --all-queries, in headlab-results/].",
)
FIGURE = typer.Option(
    None, "--figure", help="Write the pair heatmap, marginals and source tokens (PNG)."
)
TEXT_FILE = typer.Option(
    None, "--text-file", help="With --all-queries: a long text (UTF-8).", callback=an_input
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


def _opened(source: ModelChoice, text: str, choice, quiet: bool):
    """The model's attention to split (``why_attends_seq2seq.Opened``): the model itself, or
    an encoder-decoder's attention that ``choice`` names (``why_attends_seq2seq``)."""
    if choice is not None:
        from headlab.cli.why_attends_seq2seq import opened

        return opened(source, choice, text, quiet)
    import torch

    from headlab.circuits.score_sides import Sides
    from headlab.circuits.score_split import split_scores
    from headlab.cli.why_attends_seq2seq import Opened

    loaded = open_model(source, quiet=quiet)
    ids = loaded.encode(text)
    tokens = [loaded.decode([t]) for t in ids]

    def split(layer, head, positions, spec, sources, recompute, progress):
        return split_scores(
            Sides(loaded, torch.tensor([ids])),
            layer,
            head,
            positions,
            spec,
            sources=sources,
            recompute=recompute,
            tokens=tokens,
            progress=progress,
        )

    return Opened(loaded.name, ids, tokens, len(ids), loaded.heads_per_layer, split, loaded.causal)


@model_source(folder=True, backend=False)
def why_attends(
    layer: int = typer.Option(..., "--layer", help="The head's layer (from 0)."),
    head: int = typer.Option(..., "--head", help="The query head within the layer (from 0)."),
    text: str = typer.Option(TEXT, "--text", help="The text the head reads."),
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
        3,
        "--sources",
        help="Head components whose key side is split by source position (a "
        "cross-attention's: encoder heads, by the source token they read).",
    ),
    recompute: bool = typer.Option(
        False, "--recompute", help="Also each key-side term with the norms recomputed."
    ),
    source_text: str | None = typer.Option(
        None,
        "--source-text",
        help="For an encoder-decoder (T5, BART, Marian): its source; --text is then the "
        "decoder's text, and --layer a decoder block (an encoder block with --attention "
        "encoder).",
    ),
    audio: Path | None = AUDIO,
    attention: str | None = typer.Option(
        None,
        "--attention",
        help="Which attention of an encoder-decoder: decoder (its self-attention), cross "
        "(decoder queries over source keys) or encoder (over the source) [default: decoder].",
    ),
    all_queries: bool = typer.Option(
        False,
        "--all-queries",
        help="Every query at the key it attends: the pair matrix summed over them, at any "
        "length (no pair options).",
    ),
    text_file: Path | None = TEXT_FILE,
    length: int | None = typer.Option(
        None,
        "--length",
        help="With --all-queries: cut the text to this many tokens; without --text or "
        "--text-file, the built-in copy task at this length.",
    ),
    image: Path | None = IMAGE,
    source: ModelChoice = None,  # the model-source options (``model_source``)
    out: Path | None = OUT,
    figure: Path | None = FIGURE,
    force: bool = FORCE,
    as_json: bool = AS_JSON,
) -> None:
    """Split a head's scores exactly into query-side x key-side components.

    Each pre-softmax score of the head is split, with the norms held at the run's scales, into
    a pair matrix over the components that wrote the query's and the key's residual stream
    (embeddings, earlier heads through W_O, MLPs, biases), its two marginals, and the key side
    of the strongest head components split by the source token they read. With --all-queries:
    every query of a text at the key it attends, their pair matrices summed, at any length.
    With --image (ViT, DINOv2, CLIP's vision tower): the image's class token, registers and
    patches.
    """
    if image is not None:
        from headlab.cli.why_attends_image import image_split

        given = {"--text": text != TEXT, "--source-text": source_text is not None}
        given.update({"--audio": audio is not None, "--attention": attention is not None})
        given.update({"--all-queries": all_queries, "--text-file": text_file is not None})
        given["--length"] = length is not None
        out = RESULTS_DIR / "why_attends.json" if out is None else out
        result = image_split(
            source,
            image,
            layer=layer,
            head=head,
            query=query,
            keys=keys,
            sources=sources,
            recompute=recompute,
            text_options=[flag for flag, value in given.items() if value],
            claim=lambda: claim("why-attends", out, force=force, figure=figure),
            quiet=as_json,
        )
        return _written(result, out, figure, force, as_json)
    from headlab.cli.why_attends_image import refuse_images_elsewhere

    refuse_images_elsewhere(source)
    if all_queries or text_file is not None or length is not None:  # one head over all queries
        from headlab.cli.pairs_over_queries import refuse_pair_options, why_attends_all_queries

        pairs = {"--query": query is not None, "--keys": keys != "attended"}
        pairs["--sources"] = sources != 3
        pairs.update({"--recompute": recompute, "--source-text": source_text is not None})
        pairs.update({"--audio": audio is not None, "--attention": attention is not None})
        refuse_pair_options(all_queries, pairs, text != TEXT and text_file is not None)
        given = text if text != TEXT or (text_file is None and length is None) else None
        args = (layer, head, given, text_file, length, out, figure, force, as_json)
        return why_attends_all_queries(source, *args)
    out = RESULTS_DIR / "why_attends.json" if out is None else out
    queries = int_list("-1" if query is None else query, "--query", low=None)
    if queries is None:
        raise ValueError("--query takes at least one position, got none")
    if sources < 0:
        raise ValueError(f"--sources must be >= 0, got {sources}")
    from headlab.cli.why_attends_seq2seq import checked_keys, seq2seq_choice

    choice = seq2seq_choice(source, source_text, audio, attention, recompute)
    if choice is None:
        spec = _checked(layer, head, queries, keys, source, as_json)
    else:  # an encoder-decoder's decoder is causal; its cross-attention's keys are the source's
        spec = _checked(layer, head, queries if choice.causal else [], keys, None, as_json)
        checked_keys(choice, spec)
    claim("why-attends", out, force=force, figure=figure)
    loaded = _opened(source, text, choice, as_json)
    ids, shapes = loaded.ids, loaded.shapes
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

    if not spec.needs_scores():
        with flags("keys"):
            for p in positions:
                if loaded.causal is None:  # a cross-attention: keys are source positions
                    keys_for(spec, list(range(loaded.key_length)), 0, causal=False)
                else:
                    keys_for(spec, ids, p, causal=loaded.causal)
    with (
        progress(
            "why-attends: one run of the model, then the split", None, quiet=as_json
        ) as update,
        torch.no_grad(),
        flags("keys"),
    ):
        result = loaded.split(layer, head, positions, spec, sources, recompute, update)
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
    tokens, key_tokens, key_names = result.tokens[0], result.key_labels(0), result.key_names()
    for pair in result.pairs[:PRINTED]:
        score = "" if pair.score is None else f"score {pair.score:.4g} = "
        cap = f" {pair.softcap_term:+.3g} soft-cap" if pair.softcap_term else ""
        shown = pair.bias_term and abs(pair.bias_term) > 1e-4 * max(1.0, abs(pair.raw))
        bias = f" {pair.bias_term:+.3g} bias" if shown else ""  # else: the float's rounding
        head = f"{result.layer}.{result.head}"
        head = f"cross-attention {head}" if result.attention == "cross" else head
        title = (
            f"{head}: query {pair.query} {tokens[pair.query]!r} -> "
            f"key {pair.key} {key_tokens[pair.key]!r}: {score}{pair.raw:.4g} q.k{cap}{bias}"
        )
        headers, rows, left = _sides_table(result, pair, key_names)
        for table in fitted_tables(title, headers, rows, left=left):
            console.print(table)
        for split in pair.sources[:1]:
            top = sorted(zip(split.positions, split.values, strict=True), key=lambda x: -x[1])
            said = ", ".join(f"{p} {key_tokens[p]!r} {v:+.3g}" for p, v in top[:3])
            console.print(Text(f"{split.component}'s key side by source: {said}"))
    more = len(result.pairs) - PRINTED
    if more > 0:
        console.print(Text(f"... and {more} more pairs in the results file"))
    held = "the key position's stream"
    if result.key_components is not None:
        held = "the encoder's stream at the source position"
    console.print(
        Text(
            f"key side: what {held} holds; query side: the query's; each sums to q.k "
            "(norms held at the run's scales)"
        )
    )


def _sides_table(result, pair, key_names: list[str]) -> tuple[list[str], list, list[str]]:
    """(headers, rows, the columns of text) of one pair's table: the ``ROWS`` components with
    the largest key-side terms and their query-side terms; a cross-attention's two sides, whose
    components differ, side by side."""
    keyed = sorted(range(len(key_names)), key=lambda c: -abs(pair.key_marginal[c]))[:ROWS]
    if result.key_components is None:
        rows = [
            [key_names[c], f"{pair.key_marginal[c]:+.4g}", f"{pair.query_marginal[c]:+.4g}"]
            for c in keyed
        ]
        return ["component", "key side", "query side"], rows, ["component"]
    names = result.components
    queried = sorted(range(len(names)), key=lambda c: -abs(pair.query_marginal[c]))[:ROWS]
    rows = [
        [key_names[k], f"{pair.key_marginal[k]:+.4g}", names[q], f"{pair.query_marginal[q]:+.4g}"]
        for k, q in zip(keyed, queried, strict=False)
    ]
    headers = ["key component", "key side", "query component", "query side"]
    return headers, rows, ["key component", "query component"]


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (``headlab.cli.app``)."""
    app.command(name="why-attends")(why_attends)
