"""Which attention each module of a model computes, read from one observed forward.

An encoder-decoder calls three kinds of attention: the encoder's self-attention (queries and
keys over the source), the decoder's self-attention (over the target) and the cross-attention
(target queries over source keys). ``attention_kinds(model, inputs, source_len, target_len)``
runs ``inputs`` once, a source of ``source_len`` positions and a target of ``target_len``
(different lengths), and tells each call apart by its query and key lengths: no module or
family is named. A model with one stream (an image model) has only "encoder" calls.
``kinds_of`` tells them apart from the lengths the probe recorded (no forward of its own).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from headlab.models.hf.probe import RECORDER

#: The attention kinds, in the order tables show them.
KINDS = ("encoder", "decoder", "cross")
#: What each kind is, in words.
KIND_WORDS = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention (decoder queries, encoder keys)",
}


@dataclass
class _Lengths:
    """A recorder for the registered function: each module's (q_pos, k_pos) in call order."""

    seen: dict[int, tuple[nn.Module, int, int]] = field(default_factory=dict)

    def attention(self, module, query: Tensor, key: Tensor, value: Tensor, returned) -> None:
        # query (batch, head, q_pos, d_head), key (batch, kv_head, k_pos, d_head)
        self.seen.setdefault(id(module), (module, query.shape[2], key.shape[2]))


def attention_kinds(
    model: nn.Module, inputs: dict, source_len: int, target_len: int | None = None
) -> dict[int, str]:
    """id(attention module) -> its kind (``KINDS``), from one forward of ``inputs``. ValueError
    naming the module whose lengths fit no kind."""
    if target_len is not None and target_len == source_len:
        raise ValueError("the source and target lengths must differ to tell the kinds apart")
    lengths = _Lengths()
    token = RECORDER.set(lengths)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        RECORDER.reset(token)
    seen = {key: (q_len, k_len) for key, (_, q_len, k_len) in lengths.seen.items()}
    return kinds_of(model, seen, source_len, target_len)


def kinds_of(
    model: nn.Module, lengths: dict[int, tuple[int, int]], source_len: int, target_len: int | None
) -> dict[int, str]:
    """id(attention module) -> its kind, from ``lengths``: id(module) -> the (q_pos, k_pos) of
    its call on a source of ``source_len`` positions and a target of ``target_len`` (the probe
    records them: ``probe.probe``, ``probe_cache.probed_layers``). ValueError naming the module
    whose lengths fit no kind."""
    names = {id(m): (name, m) for name, m in model.named_modules()}
    kinds = {}
    for key, (q_len, k_len) in lengths.items():
        if (q_len, k_len) == (source_len, source_len):
            kinds[key] = "encoder"
        elif target_len is not None and (q_len, k_len) == (target_len, target_len):
            kinds[key] = "decoder"
        elif target_len is not None and (q_len, k_len) == (target_len, source_len):
            kinds[key] = "cross"
        else:
            name, module = names.get(key, ("?", None))
            raise ValueError(
                f"{type(module).__name__} at {name}: {q_len} queries over "
                f"{k_len} keys, neither the source ({source_len}) nor the target's "
                f"({target_len}); headlab cannot tell which attention it is"
            )
    return kinds
