"""An encoder-decoder's block norms by role (``Block.norms``): an encoder block's norm in front
of its attention and the one in front of its MLP; a decoder block's also the norm in front of
its cross-attention, the cross-attention layer's own ``input_norm`` (T5: RMSNorm in front of
each sublayer; BART: LayerNorm after each, so no norm is in front)."""

from __future__ import annotations

import pytest
from tiny_kinds import twins

from headlab.models.hf.encoder_decoder import EncoderDecoderModel


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_cross_attention_norms_are_named(kind):
    _, ours = twins(kind, seed=3)
    model = EncoderDecoderModel(kind, ours)
    for block in model.blocks():
        roles = sorted(n.role for n in block.norms)
        for norm, layer in (("attention_in", block.attention), ("cross_in", block.cross_attention)):
            front = [n for n in block.norms if n.role == norm]
            has = layer is not None and layer.input_norm is not None
            assert len(front) == has
            if has:
                assert front[0].module is layer.input_norm.module
        assert "block" in roles
