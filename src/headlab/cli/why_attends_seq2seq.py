"""``headlab why-attends`` on an encoder-decoder: which of its three attentions is split, and what
it reads.

With a source (``--source-text``, or ``--audio`` for Whisper), ``--attention`` picks the
attention: ``decoder`` (the decoder's self-attention over ``--text``, the default), ``cross``
(the decoder's queries over the source's positions) or ``encoder`` (the encoder's
self-attention over the source). Everything that the config and the input files can tell is
checked before the model loads (``seq2seq_choice``: the model's kind and family, the audio's
sampling rate, the key choice of a cross-attention); ``opened`` loads it and gives what the
command runs: the query side's positions and labels, the heads per layer, and the split.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from headlab.cli.model_source import ModelChoice
from headlab.cli.parsing import flags

#: The attentions of an encoder-decoder, in ``model ablate``'s words.
ATTENTIONS = ("decoder", "cross", "encoder")


@dataclass(frozen=True)
class Seq2SeqChoice:
    """The attention to split (``ATTENTIONS``) and the source (a ``KindInputs``), checked."""

    attention: str
    inputs: object

    @property
    def causal(self) -> bool:
        """Whether a query sees only the keys before it (the decoder's self-attention)."""
        return self.attention == "decoder"


@dataclass(frozen=True)
class Opened:
    """A loaded model's attention, ready to split: ``name``; the query side's ``ids`` and
    ``tokens``; the key side's length; ``shapes``, the heads of each layer; ``split`` (layer,
    head, positions, spec, sources, recompute, progress) -> ``ScoreSplitResult``; ``causal``:
    whether a query sees only the keys before it (None: a cross-attention, whose keys are
    another stream's)."""

    name: str
    ids: list[int]
    tokens: list[str]
    key_length: int
    shapes: list[int]
    split: Callable
    causal: bool | None


def seq2seq_choice(
    source: ModelChoice,
    source_text: str | None,
    audio: Path | None,
    attention: str | None,
    recompute: bool,
) -> Seq2SeqChoice | None:
    """The choice, or None where no source and no ``--attention`` were given. ValueError (one
    line) before any load: an ``--attention`` without a source or not one of ``ATTENTIONS``,
    a model that is not an encoder-decoder whose blocks the split runs (read from its config),
    a source the model does not read, audio at another sampling rate."""
    from headlab.cli.model_kinds import declared, read_inputs
    from headlab.models.hf.checkpoint import declared_config
    from headlab.models.hf.seq2seq_view import ROW_FAMILIES

    if source_text is None and audio is None:
        if attention is not None:
            raise ValueError(
                f"--attention {attention} reads an encoder-decoder: pass --source-text (or "
                "--audio for Whisper) with it"
            )
        return None
    attention = attention or "decoder"
    if attention not in ATTENTIONS:
        raise ValueError(f"--attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
    if recompute and attention == "cross":
        raise ValueError(
            "--recompute reads a head's own stream; a cross-attention's key side is the "
            "encoder's: leave out --recompute or use --attention decoder or encoder"
        )
    flag = "--source-text" if source_text is not None else "--audio"
    with flags("model", "download"):
        kind, name, rate = declared(source)
        config = declared_config(source.name_or_path) or {}
    family = str(config.get("model_type", ""))
    if kind != "encoder-decoder" or family not in ROW_FAMILIES:
        raise ValueError(
            f"{flag} needs an encoder-decoder of family {', '.join(sorted(ROW_FAMILIES))}, got "
            f"{name} ({kind}, family {family!r})"
        )
    hears = "num_mel_bins" in config  # its encoder reads log-mel frames (Whisper)
    if hears != (audio is not None):
        reads, want = ("audio", "--audio FILE.wav") if hears else ("text", "--source-text TEXT")
        raise ValueError(f"{name}'s encoder reads {reads}: pass {want}, got {flag}")
    inputs = read_inputs(None, audio, [source_text] if source_text is not None else None, None)
    inputs.check_for_kind(kind, name, rate)
    return Seq2SeqChoice(attention, inputs)


def checked_keys(choice: Seq2SeqChoice, spec) -> None:
    """ValueError (one line) for keys that mean nothing across two streams (a cross-attention:
    attended, top-K, all or a source position)."""
    if choice.attention == "cross":
        from headlab.circuits.score_cross import check_cross_keys

        with flags("keys"):
            check_cross_keys(spec)


def opened(source: ModelChoice, choice: Seq2SeqChoice, text: str, quiet: bool) -> Opened:
    """The model loaded and its chosen attention (``Opened``)."""
    import torch

    from headlab.cli.model_kinds import open_kind
    from headlab.heads.kind_inputs import source_batches

    model = open_kind(source, "encoder-decoder", quiet)
    with flags("source-text", "audio"):
        (batch,) = source_batches(model, choice.inputs)
        target = model.target_texts([text])
    labels = list(batch.labels[0])
    target_ids = target.input_ids[0].tolist()
    if choice.attention == "cross":
        from headlab.circuits.score_cross import CrossSides, split_cross_scores

        def split_cross(layer, head, positions, spec, sources, recompute, progress):
            sides = CrossSides(model, batch, target.input_ids)
            return split_cross_scores(
                sides,
                layer,
                head,
                positions,
                spec,
                sources=sources,
                tokens=list(target.tokens[0]),
                source_labels=labels,
                progress=progress,
            )

        shapes = model.heads_per_layer("cross")
        tokens = list(target.tokens[0])
        return Opened(model.name, target_ids, tokens, len(labels), shapes, split_cross, None)
    from headlab.circuits.score_sides import Sides
    from headlab.circuits.score_split import split_scores
    from headlab.models.hf.seq2seq_view import DecoderStream, EncoderStream

    if choice.attention == "encoder":
        view = EncoderStream(model, batch)
        ids, tokens = view.ids()[0].tolist(), labels
    else:
        view = DecoderStream(model, batch)
        ids, tokens = target_ids, list(target.tokens[0])

    def split_self(layer, head, positions, spec, sources, recompute, progress):
        return split_scores(
            Sides(view, torch.tensor([ids])),
            layer,
            head,
            positions,
            spec,
            sources=sources,
            recompute=recompute,
            tokens=tokens,
            progress=progress,
        )

    shapes = model.heads_per_layer(choice.attention)
    return Opened(view.name, ids, tokens, len(ids), shapes, split_self, choice.causal)


__all__ = ["ATTENTIONS", "Opened", "Seq2SeqChoice", "checked_keys", "opened", "seq2seq_choice"]
