"""An encoder-decoder's block norms by role (``Block.norms``): the norms inside each block,
outside its MLP; the one whose output a (cross-)attention's projections read, where the probe
found it inside the block, named "attention_in" ("cross_in"), the rest "block". T5 puts an
RMSNorm in front of each sublayer; BART normalises after each (its layer 0 reads the
embeddings' norm, outside the block: the block's resid_in is that norm's output), so a BART
decoder block's cross-attention reads the norm after its self-attention."""

from __future__ import annotations

import pytest
from tiny_kinds import twins

from headlab.models.hf.encoder_decoder import EncoderDecoderModel


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_cross_attention_norms_are_named(kind):
    _, ours = twins(kind, seed=3)
    model = EncoderDecoderModel(kind, ours)
    for block, parts in zip(model.blocks(), model._stream_blocks[1], strict=True):
        inside = {id(m) for m in parts.module.modules()}
        for role, layer in (("attention_in", block.attention), ("cross_in", block.cross_attention)):
            front = [n for n in block.norms if n.role == role]
            norm = None if layer is None else layer.input_norm
            if norm is None or id(norm.module) not in inside:
                assert front == []
            else:
                assert [n.module for n in front] == [norm.module]
        assert all(id(n.module) in inside for n in block.norms)
        assert any(n.role == "block" for n in block.norms)
    if kind == "t5":  # a norm in front of every sublayer: both attentions name theirs
        decoder = model.blocks()[-1]
        assert {n.role for n in decoder.norms} == {"attention_in", "cross_in", "block"}
