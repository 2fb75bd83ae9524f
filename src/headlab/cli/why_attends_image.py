"""``headlab why-attends --image``: the score split of an image encoder's head (ViT, DINOv2 with or
without registers, CLIP's vision tower) on one image; the work is
``headlab.circuits.image_sides`` and ``score_split``.

Checked before the model loads: the text options (``--text``, ``--source-text``) and the text's
key patterns (induction, previous, bos), the ``--keys`` and ``--query`` words, one readable
image, the model's kind (an image model, from its config.json), ``--layer`` and ``--head``
against the config's sizes, registers in a model without any, and the output paths. Once the
image is read (its patch grid known): the query and key positions. The table, results file and
figure are the text's (``why_attends_command``); the figure draws the source split on the
patch grid.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from headlab.cli import model_kinds as kinds
from headlab.cli.parsing import flags


def refuse_images_elsewhere(source) -> None:
    """ValueError (one line, from the config alone) when the text command is asked of an image
    model: it reads --image. A checkpoint with a text and an image tower (CLIP) reads texts with
    its text tower, as every text command does."""
    from headlab.cli.kind_circuits import is_other_kind
    from headlab.models.hf.checkpoint import declared_config
    from headlab.models.hf.loader import TWO_TOWERS

    if not is_other_kind(source) or kinds.declared(source)[0] != "vision":
        return
    config = declared_config(source.name_or_path) or {}
    if config.get("model_type") not in TWO_TOWERS:
        raise ValueError(
            f"{kinds.declared(source)[1]} is an image model: pass --image (one image file)"
        )


def _config_sizes(source) -> tuple[int, int, int]:
    """(layers, heads, registers) from the model's config.json (a CLIP checkpoint: its vision
    tower's); zeros where it does not say."""
    from headlab.models.hf.checkpoint import declared_config

    config = declared_config(source.name_or_path) or {}
    config = config.get("vision_config", config) if "vision_config" in config else config
    return (
        int(config.get("num_hidden_layers", 0) or 0),
        int(config.get("num_attention_heads", 0) or 0),
        int(config.get("num_register_tokens", 0) or 0),
    )


def image_split(
    source,
    image: Path,
    *,
    layer: int,
    head: int,
    query: str | None,
    keys: str,
    sources: int,
    recompute: bool,
    text_options: list[str],
    claim,
    quiet: bool,
):
    """The ``ScoreSplitResult`` of head ``layer``.``head`` on ``image`` (module docstring);
    ``claim()`` checks the output paths just before the load."""
    from headlab.circuits.image_keys import ImageKeys, check_image_queries

    if text_options:
        raise ValueError(
            f"{', '.join(text_options)}: for text models; an image model reads --image alone"
        )
    with flags("keys"):
        wanted = ImageKeys.parse(keys)
    query = "cls" if query is None else query
    with flags("query"):
        check_image_queries(query)
    for value, flag in ((layer, "--layer"), (head, "--head"), (sources, "--sources")):
        if value < 0:
            raise ValueError(f"{flag} must be >= 0, got {value}")
    inputs = kinds.read_inputs(image, None, None, None)
    if len(inputs.images) != 1:
        raise ValueError(f"--image: the split reads one image, got {len(inputs.images)}")
    kind, name, _ = kinds.declared(source)
    inputs.check_for_kind(kind, name)
    if kind != "vision":
        raise ValueError(f"--image is for image models; {name} is a {kind} model")
    layers, heads, registers = _config_sizes(source)
    if layers and layer >= layers:
        raise ValueError(f"--layer must lie in 0..{layers - 1} ({name}), got {layer}")
    if heads and head >= heads:
        raise ValueError(f"--head must lie in 0..{heads - 1} ({name}), got {head}")
    if wanted.named == "registers" and not registers:
        raise ValueError(f"--keys registers: {name} has no register tokens")
    claim()
    model = kinds.open_kind(source, kind, quiet)
    picture = inputs.images[0][1]
    return split_image(model, picture, layer, head, query, wanted, sources, recompute, quiet)


def split_image(model, picture, layer, head, query, wanted, sources, recompute, quiet=True):
    """The split on one image (a PIL image) of ``model`` (a ``VisionModel``), the keys and
    queries resolved on its patch grid."""
    import torch

    from headlab.circuits.image_keys import image_queries
    from headlab.circuits.image_sides import ImageSides
    from headlab.circuits.score_split import split_scores
    from headlab.cli.progress import progress
    from headlab.models.hf.image_stream import ImageStream

    stream = ImageStream(model, model.pixels([picture]))
    with flags("keys"):
        spec = wanted.resolve(stream.layout)
    with flags("query"):
        positions = image_queries(query, stream.layout)
    described = "why-attends: one run of the model, then the split"
    with progress(described, None, quiet=quiet) as update, torch.no_grad():
        sides = ImageSides(stream)
        with flags("keys"):
            result = split_scores(
                sides,
                layer,
                head,
                positions,
                spec,
                sources=sources,
                recompute=recompute,
                tokens=stream.tokens(),
                progress=update,
            )
    return replace(result, grid=stream.layout.grid, first_patch=stream.layout.first_patch)


__all__ = ["image_split", "refuse_images_elsewhere", "split_image"]
