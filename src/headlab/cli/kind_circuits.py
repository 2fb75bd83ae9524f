"""``headlab circuits`` on an encoder-decoder or an image model: their input options, checked
against the model's kind before it loads; the work is ``headlab.circuits.stream_run``.

An encoder-decoder: a source (``--source-text``, or ``--audio`` for Whisper) and its corrupted
twin (``--corrupted-source-text`` / ``--corrupted-audio``, of the same length); the target
(``--target-text``, default: the model's own greedy output on the clean source) is read with
both. An image model: ``--image`` and ``--corrupted-image`` (files, or folders holding as many
images, paired in name order; the metric: ``circuits.image_inputs``). The command's results
file and tables are those of a decoder's circuits.
"""

from __future__ import annotations

import typer

from headlab.cli import model_kinds as kinds
from headlab.cli.outputs import an_input
from headlab.cli.parsing import flags
from headlab.cli.progress import progress

CORRUPTED_TEXT = typer.Option(
    None,
    "--corrupted-source-text",
    metavar="<str>",
    help="Encoder-decoders: the corrupted twin of each --source-text (as many tokens).",
)
CORRUPTED_IMAGE = typer.Option(
    None,
    "--corrupted-image",
    callback=an_input,
    help="Image models: the corrupted twin of --image (a file, or a folder of as many images, "
    "paired in name order).",
)
CORRUPTED_AUDIO = typer.Option(
    None,
    "--corrupted-audio",
    callback=an_input,
    help="Whisper: the corrupted twin of --audio (a WAV file).",
)


def asked(audio, source_text, target_text, corrupted_text, corrupted_audio, *images) -> bool:
    return kinds.asked(None, audio, source_text, target_text) or bool(
        corrupted_text or corrupted_audio or any(i is not None for i in images)
    )


def is_other_kind(source) -> bool:
    """Whether the chosen model's config.json declares an encoder-decoder or an image model
    (False where it cannot be read: the decoder's path says what is wrong)."""
    try:
        return kinds.declared(source)[0] in ("encoder-decoder", "vision")
    except (ValueError, OSError):
        return False


def kind_circuits(
    source,
    audio,
    source_text,
    target_text,
    corrupted_text,
    corrupted_audio,
    *,
    image=None,
    corrupted_image=None,
    method: str,
    top: int,
    edges,
    other_inputs: list[str],
    claim,
    quiet: bool,
):
    """The ``CircuitRun`` of an encoder-decoder. Every check before the load: the options that
    do not apply (``other_inputs``: the decoder's task options given), the method, the sources
    against the model's kind and sampling rate, one corrupted source per source; ``claim()``
    checks the output paths, then the model loads."""
    from headlab.circuits.stream_run import (
        StreamCircuitRequest,
        run_stream_circuits,
        stream_inputs,
    )

    if other_inputs:
        raise ValueError(
            f"{', '.join(other_inputs)}: for decoder-only models; an "
            "encoder-decoder's circuit reads --source-text (or --audio) and its "
            "corrupted twin, an image model's --image and --corrupted-image"
        )
    with flags("method", "top", "edges"):
        request = StreamCircuitRequest(method, top, edges)
    texts = (audio, source_text, target_text, corrupted_text, corrupted_audio)
    if image is not None or corrupted_image is not None:
        if asked(*texts):
            raise ValueError(
                "--image and --corrupted-image are for image models; leave out the source, "
                "target and audio options"
            )
        return _image_circuits(source, image, corrupted_image, request, claim, quiet)
    inputs = kinds.read_inputs(None, audio, source_text, target_text)
    corrupted = kinds.read_inputs(None, corrupted_audio, corrupted_text, None)
    kind, name, rate = kinds.declared(source)
    inputs.check_for_kind(kind, name, rate)
    given = max(len(inputs.source_texts), len(inputs.waveforms))
    twins = max(len(corrupted.source_texts), len(corrupted.waveforms))
    if twins != given or bool(corrupted.waveforms) != bool(inputs.waveforms):
        flag = "--corrupted-audio" if inputs.waveforms else "--corrupted-source-text"
        raise ValueError(f"{flag}: one corrupted twin per source, got {twins} for {given}")
    corrupted.check_for_kind(kind, name, rate)
    claim()
    model = kinds.open_kind(source, kind, quiet)
    from headlab.heads.kind_inputs import source_batches, source_target_pairs

    pairs = source_target_pairs(model, inputs)
    prepared = stream_inputs(model, pairs, source_batches(model, corrupted))
    described = f"circuits: {request.method} on {name}"
    with flags("top", "edges"), progress(described, None, quiet=quiet) as update:
        return run_stream_circuits(model, prepared, request, on_step=update)


def _image_circuits(source, image, corrupted_image, request, claim, quiet: bool):
    """The ``CircuitRun`` of an image model: both image options read and paired, and the
    model's kind checked, before the load."""
    from headlab.circuits.image_inputs import image_inputs
    from headlab.circuits.stream_run import run_stream_circuits
    from headlab.models.media_inputs import read_images

    if image is None:
        raise ValueError("--corrupted-image needs --image: the clean images it corrupts")
    if corrupted_image is None:
        raise ValueError(
            "--image needs --corrupted-image: one corrupted image per image (a file, or a "
            "folder of as many)"
        )
    inputs = kinds.read_inputs(image, None, None, None)
    corrupted = read_images(corrupted_image, "--corrupted-image")
    if len(corrupted) != len(inputs.images):
        raise ValueError(
            f"--corrupted-image: one per --image, got {len(corrupted)} for {len(inputs.images)}"
        )
    kind, name, _ = kinds.declared(source)
    inputs.check_for_kind(kind, name)
    claim()
    model = kinds.open_kind(source, kind, quiet)
    clean = model.pixels([picture for _, picture in inputs.images])
    bad = model.pixels([picture for _, picture in corrupted])
    with flags("corrupted-image"):
        prepared = image_inputs(model, clean, bad)
    described = f"circuits: {request.method} on {name}"
    with flags("top", "edges"), progress(described, None, quiet=quiet) as update:
        return run_stream_circuits(model, prepared, request, on_step=update)


__all__ = [
    "CORRUPTED_AUDIO",
    "CORRUPTED_IMAGE",
    "CORRUPTED_TEXT",
    "asked",
    "is_other_kind",
    "kind_circuits",
]
