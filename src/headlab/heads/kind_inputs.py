"""What the analyses of encoder-decoders and image encoders read, built from a user's inputs.

``KindInputs``: the inputs a command was given (source texts or waveforms, target texts, images,
a decoder prompt), checked against the model's kind before it loads (``check_for_kind``: one
line naming what is wrong). Then, with the model:

    source_target_pairs  one (source, target) pair per source; a missing target is the model's
                         own greedy output (its start token first), as a teacher-forced target
    pixel_batches        the images through the model's image processor, ``batch_size`` a batch
    generate_from        greedy ids after the decoder prompt, heads of one kind ablated or not
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from headlab.heads.encoder_decoder_heads import check_heads, zero_masks
from headlab.results.generation_result import GenerationResult

#: What each kind reads, in a command's words.
READS = {
    "encoder-decoder": "a source (--source-text, or --audio for Whisper)",
    "vision": "images (--image)",
    "text": "text",
}


@dataclass(frozen=True)
class KindInputs:
    """source_texts, waveforms ((samples,) float32, rate), target_texts (one per source or
    none), images ([(name, PIL image)]), prompt (a decoder prompt, or None)."""

    source_texts: Sequence[str] = ()
    waveforms: Sequence[tuple[torch.Tensor, int]] = ()
    target_texts: Sequence[str] = ()
    images: Sequence[tuple[str, object]] = field(default_factory=list)
    prompt: str | None = None

    def asked_kind(self) -> str:
        """The kind these inputs are for: "vision", "encoder-decoder" or "text"."""
        if self.images:
            return "vision"
        if self.source_texts or self.waveforms or self.target_texts:
            return "encoder-decoder"
        return "text"

    def check_for_kind(self, kind: str, name: str, rate: int | None = None) -> None:
        """ValueError in one line when these inputs do not fit a ``kind`` model named ``name``
        (``rate``: the sampling rate its feature extractor declares, if known)."""
        asked = self.asked_kind()
        if self.source_texts and self.waveforms:
            raise ValueError("pass --source-text or --audio, not both")
        if self.images and (self.source_texts or self.waveforms or self.target_texts):
            raise ValueError("--image is for image models; leave out the source and target")
        if asked != kind and asked != "text":
            article = "an" if kind[0] in "aeiou" else "a"
            raise ValueError(
                f"{name} is {article} {kind} model, which reads {READS[kind]}; got {READS[asked]}"
            )
        if kind == "encoder-decoder" and not (self.source_texts or self.waveforms):
            what = "a decoder prompt" if self.prompt else "this command"
            raise ValueError(
                f"{name} is an encoder-decoder: {what} needs a source: pass "
                "--source-text TEXT (or --audio FILE.wav for Whisper)"
            )
        if asked == "text" and kind == "vision":
            raise ValueError(
                f"{name} is an image model: pass --image (a file or a folder); "
                "text-only commands do not run on it"
            )
        sources = max(len(self.source_texts), len(self.waveforms))
        if self.target_texts and len(self.target_texts) != sources:
            raise ValueError(
                f"--target-text: one per source, got {len(self.target_texts)} for {sources} sources"
            )
        for _, got in self.waveforms:
            if rate is not None and got != rate:
                raise ValueError(
                    f"--audio must be sampled at {rate} Hz (the model's feature "
                    f"extractor), got {got} Hz; resample it first"
                )


def source_batches(model, inputs: KindInputs) -> list:
    """One SourceBatch per source (text through the tokenizer, audio through the feature
    extractor)."""
    if inputs.waveforms:
        return [model.source_audio([w], rate) for w, rate in inputs.waveforms]
    return [model.source_texts([text]) for text in inputs.source_texts]


def source_target_pairs(model, inputs: KindInputs, max_new_tokens: int = 32) -> list:
    """[(SourceBatch, TokenBatch)], one per source (see the module docstring)."""
    pairs = []
    for i, source in enumerate(source_batches(model, inputs)):
        if inputs.target_texts:
            target = model.target_texts([inputs.target_texts[i]])
        else:
            target = model.target_ids([model.generate(source, max_new_tokens)[0]])
        if target.input_ids.shape[1] < 2:
            target = model.target_ids([[model.start_id(), *target.input_ids[0].tolist()]])
        pairs.append((source, target))
    return pairs


def pixel_batches(model, inputs: KindInputs, batch_size: int = 8) -> list[torch.Tensor]:
    """The images through the model's processor, ``batch_size`` images a batch."""
    images = [image for _, image in inputs.images]
    return [model.pixels(images[i : i + batch_size]) for i in range(0, len(images), batch_size)]


def generate_from(
    model,
    inputs: KindInputs,
    max_new_tokens: int,
    kind: str = "cross",
    heads: Sequence[tuple[int, int]] = (),
) -> GenerationResult:
    """Greedy continuation of the decoder prompt after the first source, with ``heads`` of
    ``kind`` zeroed in every step (none: as the model is)."""
    masks = None
    if heads:
        check_heads(model, kind, heads)
        masks = {kind: zero_masks(model, kind, heads)}
    source = source_batches(model, inputs)[0]
    prompt = inputs.prompt or ""
    ids = model.generate(source, max_new_tokens, masks, prompt=prompt)[0]
    return GenerationResult(model.name, prompt, ids, model.decode(ids), list(heads))
