"""A layer with every head removed (``without_heads``) traces: no heads in any site, and the
output its W_O adds, as on the original model with that layer's heads masked (transformers'
own Llama: W_O inside the attention module, no bias; BERT: W_O outside it, with a bias)."""

from __future__ import annotations

import pytest
import torch
import transformers

from headlab import attach
from headlab.models.interface import TokenBatch

POS = 7


def _llama():
    config = transformers.LlamaConfig(
        vocab_size=53,
        hidden_size=42,
        num_attention_heads=3,
        num_key_value_heads=1,
        intermediate_size=37,
        num_hidden_layers=3,
        max_position_embeddings=41,
    )
    return transformers.LlamaForCausalLM(config)


def _bert():
    config = transformers.BertConfig(
        vocab_size=53,
        hidden_size=30,
        num_attention_heads=5,
        intermediate_size=37,
        num_hidden_layers=3,
        max_position_embeddings=41,
    )
    return transformers.BertModel(config, add_pooling_layer=False)


@pytest.mark.parametrize("build", [_llama, _bert])
def test_a_layer_without_heads_traces_as_the_masked_layer(build):
    torch.manual_seed(11)
    built = build().eval()
    with torch.no_grad():  # transformers starts biases at 0: W_O's must show in the output
        for name, parameter in built.named_parameters():
            if name.endswith("bias"):
                parameter.normal_()
    model = attach(built)
    heads = model.heads_per_layer[1]
    pruned = model.without_heads({1: range(heads)})
    assert pruned.heads_per_layer == [heads if i != 1 else 0 for i in range(3)]
    ids = torch.randint(1, 53, (2, POS))
    mask = torch.ones(2, POS, dtype=torch.bool)
    mask[1, -2:] = False  # a padded row too
    batch = TokenBatch(ids, mask, [["t"] * POS, ["t"] * (POS - 2)])
    head_mask = [torch.ones(h) for h in model.heads_per_layer]
    head_mask[1] = torch.zeros(heads)
    expected_out, expected = model.trace_batch(batch, head_mask)
    out, traces = pruned.trace_batch(batch)
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    empty = traces[1]
    for site in ("q", "k", "v", "scores", "weights", "head_outputs", "contributions"):
        assert getattr(empty, site).shape[:2] == (2, 0), site
    assert empty.weights.shape[2:] == (POS, POS)
    # what the layer adds with no heads: W_O's bias (BERT) or nothing (Llama), on every position
    torch.testing.assert_close(empty.output, expected[1].output, rtol=1e-6, atol=1e-6)
    assert (empty.output.abs().sum() > 0) == (build is _bert)
    for kept in (0, 2):
        torch.testing.assert_close(
            traces[kept].weights, expected[kept].weights, rtol=1e-5, atol=1e-6
        )
