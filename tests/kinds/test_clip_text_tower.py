"""CLIP's text tower runs through the text route (``headlab.attach``) as any text encoder: its
states and each head's weights equal transformers' eager attention on a random tiny model."""

from __future__ import annotations

import copy
from contextlib import ExitStack

import torch


def test_clip_text_tower_attaches_and_its_heads_equal_eager():
    import transformers

    import headlab
    from headlab.attention.interventions import record

    torch.manual_seed(0)
    config = transformers.CLIPTextConfig(
        vocab_size=97,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=40,
        max_position_embeddings=32,
        eos_token_id=2,
    )
    eager = transformers.CLIPTextModel(config).eval()
    eager.set_attn_implementation("eager")
    model = headlab.attach(copy.deepcopy(eager))
    ids = torch.tensor([[5, 6, 7, 8, 9, 2], [11, 12, 2, 0, 0, 0]])
    mask = ids != 0
    mask[1, 3:] = False
    with torch.no_grad():
        want = eager(input_ids=ids, attention_mask=mask.long(), output_attentions=True)
        with ExitStack() as stack:
            entered = [
                stack.enter_context(record(layer, ["weights"]))
                for layer in model.attention_layers()
            ]
            model.model(input_ids=ids, attention_mask=mask.long())
        states = model.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    assert model.heads_per_layer == [4, 4, 4]
    real = mask[:, :, None] & mask[:, None, :]  # (batch, q_pos, k_pos) rows of real tokens
    for got, weights in zip(entered, want.attentions, strict=True):
        gap = (got["weights"] - weights).abs() * real[:, None]
        assert float(gap.max()) < 1e-6
    assert float(((states - want.last_hidden_state).abs() * mask[..., None]).max()) < 1e-5
