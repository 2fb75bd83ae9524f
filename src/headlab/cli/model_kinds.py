"""``model heads``, ``model ablate`` and ``model generate`` on encoder-decoders and image models:
their input options and what the commands print for them.

Every input is read and checked against the model's kind (from its config.json) before the
model loads: an unreadable image or WAV, a sample rate its feature extractor does not take, a
text-only command on an image model, a decoder prompt without a source. The library does the
work (``heads.kind_inputs``, ``heads.encoder_decoder_heads``, ``heads.vision_heads``).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from headlab.cli.head_tables import head_grid, top_table
from headlab.cli.model_options import claim_analysis
from headlab.cli.model_source import ModelChoice, hub_access
from headlab.cli.outputs import an_input, emit_result, note_lines, print_json
from headlab.cli.parsing import flags
from headlab.cli.progress import progress
from headlab.cli.tables import fitted_tables
from headlab.results.locations import model_results

IMAGE = typer.Option(
    None, "--image", callback=an_input, help="An image file or a folder of them (image models)."
)
AUDIO = typer.Option(
    None,
    "--audio",
    callback=an_input,
    help="A PCM WAV file at the model's sampling rate (Whisper).",
)
SOURCE_TEXT = typer.Option(
    None,
    "--source-text",
    metavar="<str>",
    help="A source text for an encoder-decoder (repeat for more).",
)
TARGET_TEXT = typer.Option(
    None,
    "--target-text",
    metavar="<str>",
    help="The target of each --source-text [default: the model's own greedy output].",
)
TOWER = typer.Option(
    None,
    "--tower",
    help="Which tower of a model with a text and an image "
    "tower (CLIP): text (the text options) or vision (--image) [default: "
    "vision with --image].",
)
ATTENTION = typer.Option(
    None,
    "--attention",
    help="The attention kind of the --ablate heads: "
    "encoder, decoder or cross [default: cross; images: encoder].",
)


def asked(image, audio, source_text, target_text) -> bool:
    """Whether any option of a new kind was given."""
    return any(x for x in (image, audio, source_text, target_text))


def declared(source: ModelChoice) -> tuple[str, str, int | None]:
    """(kind, name, sampling rate or None) of the chosen model from its config.json alone."""
    from headlab.models.hf.checkpoint import declared_config, locate
    from headlab.models.hf.kinds_loader import declared_kind, declared_sampling_rate

    hub_access(source.download)
    config = declared_config(source.name_or_path)
    kind = declared_kind(config)
    name = str(source.name_or_path or "minilm")
    rate = None
    if kind == "encoder-decoder":
        rate = declared_sampling_rate(locate(source.name_or_path).folder)
    return kind, Path(name).name or name, rate


def text_tower(
    source: ModelChoice, tower: str | None, image, audio, source_text, target_text
) -> bool:
    """Whether the command runs a two-tower model's text tower on the text route (``--tower
    text``); ValueError in one line, before the model loads, for a tower that does not fit the
    model or the inputs, or text input to a two-tower model without ``--tower text``."""
    from headlab.models.hf.checkpoint import declared_config
    from headlab.models.hf.loader import TWO_TOWERS

    if tower is None and (image is not None or asked(None, audio, source_text, target_text)):
        return False
    if tower not in (None, "text", "vision"):
        raise ValueError(f"--tower must be text or vision, got {tower!r}")
    hub_access(source.download)
    config = declared_config(source.name_or_path)
    family = config.get("model_type") if isinstance(config, dict) else None
    name = Path(str(source.name_or_path or "minilm")).name
    if family not in TWO_TOWERS:
        if tower is None:
            return False
        raise ValueError(
            f"--tower is for models with a text and an image tower (CLIP); {name} is a "
            f"{family or 'text'} model with one: leave out --tower"
        )
    if tower is None:
        raise ValueError(
            f"{name} holds a text and an image tower ({family}): pass --tower text to run its "
            "text tower on texts, or --image for its image tower"
        )
    if tower == "vision":
        if image is None:
            raise ValueError("--tower vision reads images: pass --image (a file or a folder)")
        return False
    if asked(image, audio, source_text, target_text):
        raise ValueError(
            "--tower text reads texts (--corpus, --text-file); leave out --image, "
            "--audio, --source-text and --target-text"
        )
    return True


def read_inputs(image, audio, source_text, target_text, prompt=None):
    """The options as ``KindInputs``, every file read now (one line for an unreadable one)."""
    from headlab.heads.kind_inputs import KindInputs
    from headlab.models.media_inputs import read_images, read_wav

    images = read_images(image, "--image") if image is not None else []
    waves = [read_wav(audio, "--audio")] if audio is not None else []
    return KindInputs(
        tuple(source_text or ()), tuple(waves), tuple(target_text or ()), images, prompt
    )


def checked(source: ModelChoice, inputs) -> str:
    """The model's kind, once the inputs fit it (ValueError in one line otherwise)."""
    kind, name, rate = declared(source)
    inputs.check_for_kind(kind, name, rate)
    return kind


def open_kind(source: ModelChoice, kind: str, quiet: bool):
    from headlab.models.hf.kinds_loader import load_encoder_decoder, load_vision

    load = load_vision if kind == "vision" else load_encoder_decoder
    with flags("model", "download"), progress("loading the model", None, quiet=quiet):
        return load(source.name_or_path, download=source.download)


def kind_heads(source, inputs, metric: str | None, out, as_json: bool, force: bool) -> None:
    """``model heads`` of an encoder-decoder (each attention kind) or an image model."""
    from headlab.heads.encoder_decoder_heads import SELF_METRICS
    from headlab.heads.vision_heads import VISION_METRICS

    kind = checked(source, inputs)
    names = VISION_METRICS if kind == "vision" else SELF_METRICS
    metric = metric or ("cls" if kind == "vision" else "entropy")
    if metric not in names:
        raise ValueError(
            f"--metric must be one of {', '.join(names)} for this model, got {metric!r}"
        )
    analysis = "heads-vision" if kind == "vision" else "heads-encoder-decoder"
    out = model_results(analysis) if out is None else out
    claim_analysis(analysis, out, force)
    model = open_kind(source, kind, as_json)
    if kind == "vision":
        from headlab.heads.kind_inputs import pixel_batches
        from headlab.heads.vision_heads import vision_statistics

        batches = pixel_batches(model, inputs)
        with progress("head statistics: images", len(inputs.images), quiet=as_json) as update:
            result = vision_statistics(model, batches, on_batch=update)
        emit_result(result, out, force, as_json, _vision_tables(result, metric))
        return
    from headlab.heads.encoder_decoder_heads import encoder_decoder_statistics
    from headlab.heads.kind_inputs import source_target_pairs

    pairs = source_target_pairs(model, inputs)
    with progress("head statistics: sources", len(pairs), quiet=as_json) as update:
        result = encoder_decoder_statistics(model, pairs, on_batch=update)
    tables, notes = [], []
    for name, stats in result.kinds.items():
        if metric not in stats.metrics:
            notes.append(f"{name} attention: no {metric} (it has {', '.join(stats.metrics)})")
            continue
        title = f"{metric} per head, {name} attention, {result.model}, {result.n_sources} sources"
        tables.extend(head_grid(title, stats.metrics[metric]))
    notes += sorted({n for stats in result.kinds.values() for n in stats.notes})
    tables.extend(note_lines(notes))
    emit_result(result, out, force, as_json, tables)


def _vision_tables(result, metric: str) -> list:
    if metric not in result.metrics:  # registers, in a model without any
        return [*note_lines([f"no {metric} in this model ({', '.join(result.metrics)})"])]
    title = f"{metric} per head, {result.model}, {result.n_images} images"
    tables = head_grid(title, result.metrics[metric])
    tables.append(top_table("top high-norm heads (weight)", _top(result.metrics["high_norm"])))
    rows = []
    for layer in range(result.num_layers + 1):
        ratios = [max(image[layer][1 + len(result.registers) :]) for image in result.norm_ratios]
        counts = [len(tokens) for tokens in result.high_norm_tokens(layer)]
        where = "output" if layer == result.num_layers else str(layer)
        rows.append([where, f"{max(ratios, default=0):.1f}", str(sum(counts))])
    title = (
        f"patch norms against the median, at each layer's input (high-norm: > "
        f"{result.threshold:g}x)"
    )
    tables.extend(fitted_tables(title, ["layer", "max ratio", "high-norm tokens"], rows))
    return [*tables, *note_lines(result.notes)]


def _top(grid: list[list[float]], count: int = 5) -> list[tuple[int, int, float]]:
    cells = [(layer, head, v) for layer, row in enumerate(grid) for head, v in enumerate(row)]
    return sorted(cells, key=lambda c: -c[2])[:count]


def kind_ablate(source, inputs, attention, heads: str, out, as_json: bool, force: bool) -> None:
    """``model ablate`` of an encoder-decoder (heads of one attention kind) or an image model."""
    from headlab.heads.ablation import parse_heads

    with flags(heads="--ablate"):
        chosen = parse_heads(heads)
    kind = checked(source, inputs)
    attention = attention or ("encoder" if kind == "vision" else "cross")
    allowed = ("encoder",) if kind == "vision" else ("encoder", "decoder", "cross")
    if attention not in allowed:
        raise ValueError(
            f"--attention must be {' or '.join(allowed)} for this model, got {attention!r}"
        )
    out = model_results("ablate-kind") if out is None else out
    claim_analysis("ablate-kind", out, force)
    model = open_kind(source, kind, as_json)
    with flags(heads="--ablate"), progress("ablation", None, quiet=as_json):
        if kind == "vision":
            from headlab.heads.kind_inputs import pixel_batches
            from headlab.heads.vision_heads import vision_ablation

            result = vision_ablation(model, pixel_batches(model, inputs), chosen)
        else:
            from headlab.heads.encoder_decoder_heads import encoder_decoder_ablation
            from headlab.heads.kind_inputs import source_target_pairs

            pairs = source_target_pairs(model, inputs)
            result = encoder_decoder_ablation(model, pairs, attention, chosen)
    row = [
        ",".join(f"{l}.{h}" for l, h in result.heads),
        result.kind,
        f"{result.baseline:.4f}",
        f"{result.ablated:.4f}",
        f"{result.change:+.4f}",
    ]
    title = f"Ablation, {result.model}, {result.n_inputs} inputs"
    tables = fitted_tables(
        title,
        ["heads", "attention", "baseline", "ablated", "change"],
        [row],
        keys=0,
        left=["heads"],
    )
    emit_result(result, out, force, as_json, [*tables, Text(f"objective: {result.objective}")])


def kind_generate(source, inputs, max_new_tokens: int, attention, heads, as_json: bool) -> None:
    """``model generate`` of an encoder-decoder: greedy after PROMPT, from the source."""
    from headlab.heads.ablation import parse_heads
    from headlab.heads.kind_inputs import generate_from

    chosen = []
    if heads is not None:
        with flags(heads="--ablate"):
            chosen = parse_heads(heads)
    kind, name, _ = declared(source)
    if kind == "vision":
        raise ValueError(
            f"{name} is an image model (it reads pixel_values, not text): model "
            "generate is for models that write text"
        )
    kind = checked(source, inputs)
    attention = attention or "cross"
    model = open_kind(source, kind, as_json)
    with flags("max_new_tokens", heads="--ablate"), progress("generating", None, quiet=as_json):
        result = generate_from(model, inputs, max_new_tokens, attention, chosen)
    if as_json:
        print_json(result.to_dict(), ensure_ascii=False)
        return
    print(result.text)
