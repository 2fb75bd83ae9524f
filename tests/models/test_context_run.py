"""Context runs (models/hf/context_run.py): chosen positions run alone through the blocks, their
heads attending a whole run's keys and values, give the whole run's stream, head outputs and MLP
outputs at those positions (the outside reference: transformers' own forward of every position,
kept by ``run_protocol.cache``), within 1e-10 in float64, on families with rotary and learned
positions, GQA and biases; a layer with a soft-cap is refused."""

import pytest
import torch
from hf_families import VOCAB, build

from headlab.models.hf import attach
from headlab.models.hf.context_run import context_cache, key_values
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import cache

LENGTH = 11


def _batch(seed: int) -> TokenBatch:
    ids = torch.randint(3, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(seed))
    return TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), [])


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen2", "phi3"])
def test_context_rows_equal_the_whole_run(family):
    model = attach(build(family).double())
    batch = _batch(5)
    whole = cache(model, batch)
    context = key_values(model, batch)
    for positions in ([0, 3, 4, 10], [7], list(range(LENGTH))):
        at = torch.tensor(positions)
        rows = context_cache(model, batch, at, context)
        for layer, resid in enumerate(rows.resid):
            assert torch.allclose(resid, whole.resid[layer][:, at], rtol=0, atol=1e-10)
        for layer, heads in enumerate(rows.head_outputs):
            assert torch.allclose(heads, whole.head_outputs[layer][:, :, at], rtol=0, atol=1e-10)
            if whole.mlp[layer] is not None:
                assert torch.allclose(rows.mlp[layer], whole.mlp[layer][:, at], rtol=0, atol=1e-10)


def test_context_runs_refuse_a_soft_cap():
    model = attach(build("gemma2").double())
    batch = _batch(1)
    context = key_values(model, batch)
    with pytest.raises(ValueError, match="plain causal attention"):
        context_cache(model, batch, torch.tensor([2, 5]), context)


def test_positions_must_ascend():
    model = attach(build("llama").double())
    batch = _batch(2)
    context = key_values(model, batch)
    with pytest.raises(ValueError, match="ascending"):
        context_cache(model, batch, torch.tensor([5, 2]), context)
