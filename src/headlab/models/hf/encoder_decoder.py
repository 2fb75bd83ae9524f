"""``EncoderDecoderModel``: a transformers encoder-decoder (T5, BART, Marian, Whisper) on headlab's
attention, its heads kept apart by kind.

The model's own code runs untouched; every attention call goes to headlab's function, which
applies what each module's ``HFAttentionLayer`` holds (sites, a head mask). The layers are found
by one short observed forward (``probe``; on a second load of a checkpoint, its cached entry
checked by two forwards that each stop after a first block) and sorted by kind by the lengths
of their calls (``attention_kinds.kinds_of``):

    layers["encoder"]   the encoder's self-attention, one per encoder block
    layers["decoder"]   the decoder's self-attention (causal)
    layers["cross"]     the cross-attention: decoder queries over the encoder's output; its
                        head mask and interventions act on each head's output before the
                        cross-attention's own W_O

A source is text (token ids through the tokenizer) or, for Whisper, audio: the waveform goes
through the model's own feature extractor to log-mel frames; the encoder's positions are then
20 ms steps of audio (``SourceBatch.labels``). A target is token ids that start with the
decoder's start token (prepended where the tokenizer does not put it).

    run(source, target, head_masks) -> (batch, q_pos, vocab) logits, teacher-forced
    loss(source, target, head_masks) -> the mean next-token cross-entropy over the target
    generate(source, max_new_tokens, head_masks) -> greedy ids (the model's own ``generate``,
                        with its cache); the head masks act in every step

The run protocol (two streams, the blocks of both, runs from a block): ``seq2seq_run.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.models.hf.attention_kinds import KINDS, attention_kinds, kinds_of
from headlab.models.hf.layer import HFAttentionLayer, keep_all, layer_of
from headlab.models.hf.probe import probe
from headlab.models.hf.probe_cache import probed_layers
from headlab.models.hf.runnable import model_family
from headlab.models.hf.seq2seq_run import Seq2SeqRoute
from headlab.models.interface import HeadMask, TokenBatch, layer_masks

#: Seconds of audio per encoder position of Whisper (10 ms frames, the convolution's stride 2).
SECONDS_PER_POSITION = 0.02


@dataclass(frozen=True)
class SourceBatch:
    """What the encoder reads: ``inputs`` (the model's keywords: ``input_ids`` and
    ``attention_mask``, or Whisper's ``input_features`` (batch, mel, frame)), ``mask`` (batch,
    pos) bool, True on the encoder's real positions, and ``labels``: each text's label of every
    encoder position (its token, or the time of an audio position)."""

    inputs: dict[str, Tensor]
    mask: Tensor
    labels: list[list[str]]


def _pad(rows: list[list[int]], pad: int) -> tuple[Tensor, Tensor]:
    """(batch, pos) ids padded on the right with ``pad``, and the mask of real ids."""
    if not rows or min(map(len, rows)) == 0:
        raise ValueError("every sequence must hold at least one token, got an empty one")
    ids = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    mask = torch.zeros(ids.shape, dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
    return ids, mask


class EncoderDecoderModel(Seq2SeqRoute):
    """A transformers encoder-decoder on headlab's attention (see the module docstring)."""

    def __init__(
        self, name: str, model: torch.nn.Module, tokenizer=None, features=None, cached=False
    ):
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.features = features  # Whisper's feature extractor, or None
        self.config = model.config
        self.family = model_family(model)
        self.reads = "audio" if model.main_input_name == "input_features" else "text"
        self.layers = self._layers(cached)

    # ------------------------------------------------------------------ layers
    def _probe_inputs(self) -> tuple[dict, int, int]:
        """A forward's keywords with a source and a target of different lengths."""
        device = next(self.model.parameters()).device
        target = torch.tensor([[self.start_id(), 1, 2]], device=device) % self.vocab_size
        if self.reads == "audio":
            frames = 2 * int(self.config.max_source_positions)
            dtype = next(self.model.parameters()).dtype
            features = torch.zeros(
                1, int(self.config.num_mel_bins), frames, device=device, dtype=dtype
            )
            inputs = {"input_features": features, "decoder_input_ids": target}
            return inputs, int(self.config.max_source_positions), 3
        source = (torch.arange(1, 6, device=device) % self.vocab_size)[None]
        inputs = {
            "input_ids": source,
            "attention_mask": torch.ones_like(source),
            "decoder_input_ids": target,
        }
        return inputs, 5, 3

    def _stages(self, inputs: dict, source_len: int) -> list[tuple[torch.nn.Module, dict]]:
        """Where a cached probe's check runs (``probe_cache.probed_layers``): the encoder's
        first layer on the source, the decoder's on zero encoder states of ``source_len``
        positions, so that neither forward runs past its first block."""
        from transformers.modeling_outputs import BaseModelOutput

        encoder, decoder = self.model.get_encoder(), self.model.get_decoder()
        weight = next(self.model.parameters())
        width = int(self.config.get_text_config().hidden_size)
        states = weight.new_zeros(1, source_len, width)
        given = {
            "encoder_outputs": BaseModelOutput(last_hidden_state=states),
            "decoder_input_ids": inputs["decoder_input_ids"],
        }
        if "attention_mask" in inputs:
            given["attention_mask"] = inputs["attention_mask"]
        return [(encoder, inputs), (decoder, given)]

    def _layers(self, cached: bool) -> dict[str, list[HFAttentionLayer]]:
        """Each kind's layers; ``cached``: a model transformers built from a checkpoint, whose
        probe is kept in headlab's cache (``probe_cache``; a model in memory is always
        probed). The kinds are told apart by the lengths of the probe's calls."""
        inputs, source_len, target_len = self._probe_inputs()
        found = [layer_of(m) for m in self.model.modules()]
        layers = [layer for layer in found if layer is not None]
        if not layers:  # the first time: one observed forward (or a cached entry) finds them
            lengths: dict = {}
            if cached:
                stages = self._stages(inputs, source_len)
                found = probed_layers(
                    self.model, self.family, inputs=inputs, stages=stages, lengths=lengths
                )
            else:
                found = probe(self.model, self.family, inputs=inputs, lengths=lengths)
            layers = keep_all(self.model, found)
            kinds = kinds_of(self.model, lengths, source_len, target_len)
        else:  # layers kept by an earlier wrapper of this model: one forward sorts them
            kinds = attention_kinds(self.model, inputs, source_len, target_len)
        by_kind = {kind: [] for kind in KINDS}
        for layer in layers:
            by_kind[kinds[id(layer.module)]].append(layer)
        return by_kind

    def attention_layers(self, kind: str) -> list[HFAttentionLayer]:
        """The layers of one kind (``KINDS``), in order; ValueError for another name."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return self.layers[kind]

    def heads_per_layer(self, kind: str) -> list[int]:
        return [layer.num_heads for layer in self.attention_layers(kind)]

    # ------------------------------------------------------------------ inputs
    @property
    def vocab_size(self) -> int:
        return int(self.config.get_text_config().vocab_size)

    def start_id(self) -> int:
        """The decoder's start token."""
        start = getattr(self.config, "decoder_start_token_id", None)
        if start is None:
            start = getattr(self.config, "pad_token_id", None)
        return int(start or 0)

    def _pad_id(self) -> int:
        pad = getattr(self.config, "pad_token_id", None)
        return int(pad if pad is not None else 0)

    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError(f"{self.name} has no tokenizer: pass token ids")
        return self.tokenizer

    def source_ids(self, rows: list[list[int]]) -> SourceBatch:
        """A text source from token ids (the tokenizer's special tokens included)."""
        if self.reads != "text":
            raise ValueError(f"{self.name} reads audio (input_features), not a text source")
        ids, mask = _pad(rows, self._pad_id())
        labels = [[str(i) for i in row] for row in rows]
        if self.tokenizer is not None:
            labels = [self.tokenizer.convert_ids_to_tokens(row) for row in rows]
        return SourceBatch({"input_ids": ids, "attention_mask": mask.long()}, mask, labels)

    def source_texts(self, texts: list[str]) -> SourceBatch:
        """A text source through the tokenizer."""
        tokenizer = self._need_tokenizer()
        return self.source_ids([list(tokenizer(t)["input_ids"]) for t in texts])

    def source_audio(self, waveforms: list[Tensor], sampling_rate: int) -> SourceBatch:
        """An audio source: mono waveforms (samples,) at ``sampling_rate`` through the model's own
        feature extractor. ValueError for a rate the extractor was not made for."""
        if self.reads != "audio":
            raise ValueError(f"{self.name} reads text (input_ids), not audio")
        if self.features is None:
            raise ValueError(f"{self.name} has no feature extractor to read audio with")
        wanted = int(self.features.sampling_rate)
        if sampling_rate != wanted:
            raise ValueError(f"audio must be sampled at {wanted} Hz, got {sampling_rate} Hz")
        arrays = [w.detach().to(torch.float32).cpu().numpy() for w in waveforms]
        features = self.features(arrays, sampling_rate=wanted, return_tensors="pt")
        values = features["input_features"]  # (batch, mel, frame)
        values = values.to(next(self.model.parameters()).dtype)  # a float64 model reads float64
        positions = int(self.config.max_source_positions)
        mask = torch.ones(values.shape[0], positions, dtype=torch.bool)
        times = [f"{i * SECONDS_PER_POSITION:.2f}s" for i in range(positions)]
        return SourceBatch({"input_features": values}, mask, [times] * values.shape[0])

    def target_ids(self, rows: list[list[int]]) -> TokenBatch:
        """Decoder inputs: each row with the start token first (prepended where missing)."""
        start = self.start_id()
        rows = [row if row and row[0] == start else [start, *row] for row in rows]
        ids, mask = _pad(rows, self._pad_id())
        tokens = [[str(i) for i in row] for row in rows]
        if self.tokenizer is not None:
            tokens = [self.tokenizer.convert_ids_to_tokens(row) for row in rows]
        return TokenBatch(ids, mask, tokens)

    def target_texts(self, texts: list[str]) -> TokenBatch:
        """Decoder inputs from texts, through the tokenizer (its special tokens kept)."""
        tokenizer = self._need_tokenizer()
        return self.target_ids([list(tokenizer(t)["input_ids"]) for t in texts])

    # ------------------------------------------------------------------ running
    @contextmanager
    def masked(self, head_masks: Mapping[str, HeadMask] | None):
        """Within the block each layer of each kind scales its heads by its entry of
        ``head_masks[kind]`` (one entry per layer of that kind, as ``HeadMask``)."""
        chosen = [
            (layer, mask)
            for kind, masks in (head_masks or {}).items()
            for layer, mask in zip(
                self.attention_layers(kind),
                layer_masks(masks, len(self.attention_layers(kind))),
                strict=True,
            )
        ]
        try:
            for layer, mask in chosen:
                layer.head_mask = mask
            yield
        finally:
            for layer, _ in chosen:
                layer.head_mask = None

    def run(
        self, source: SourceBatch, target: TokenBatch, head_masks: Mapping | None = None
    ) -> Tensor:
        """(batch, q_pos, vocab) next-token logits of the target, teacher-forced."""
        with self.masked(head_masks):
            out = self.model(
                **source.inputs,
                decoder_input_ids=target.input_ids,
                decoder_attention_mask=target.attention_mask.long(),
                use_cache=False,
            )
        return out.logits

    def loss(
        self, source: SourceBatch, target: TokenBatch, head_masks: Mapping | None = None
    ) -> Tensor:
        """The mean next-token cross-entropy over the target's real tokens after the first."""
        logits = self.run(source, target, head_masks)[:, :-1]  # (batch, q_pos - 1, vocab)
        wanted = target.input_ids[:, 1:]
        counted = target.attention_mask[:, 1:]
        if not counted.any():
            raise ValueError("every target holds only its start token: nothing to predict")
        losses = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2).float(), wanted, reduction="none"
        )
        return losses[counted].mean()

    def generate(
        self,
        source: SourceBatch,
        max_new_tokens: int = 32,
        head_masks: Mapping | None = None,
        prompt: str = "",
    ) -> list[list[int]]:
        """Greedy new ids of each source (the model's own ``generate`` and cache) after the start
        token and the decoder ``prompt`` (text, through the tokenizer without special tokens),
        up to and with the end token; the head masks act in every step."""
        keywords = {}
        given = [self.start_id()]
        if prompt:
            given += list(self._need_tokenizer()(prompt, add_special_tokens=False)["input_ids"])
            batch = source.mask.shape[0]
            keywords["decoder_input_ids"] = torch.tensor([given] * batch)
        with self.masked(head_masks), torch.no_grad():
            out = self.model.generate(
                **source.inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                **keywords,
            )
        sequences = out if isinstance(out, Tensor) else out.sequences
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ends = set(eos if isinstance(eos, list) else [eos]) - {None}
        rows = []
        for row in sequences.tolist():
            if row[: len(given)] == given:
                row = row[len(given) :]
            cut = next((i for i, t in enumerate(row) if t in ends), len(row))
            rows.append(row[: cut + 1])
        return rows

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self._need_tokenizer().decode(ids, skip_special_tokens=skip_special)
