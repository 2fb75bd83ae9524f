"""The sliced gradients at attention receivers' inputs (receiver_grads.py) against autograd.

- Each receiver's gradient at the stream, made from the gradient at the projections' outputs
  by W's d_head rows and the norm's transpose (no backward), equals autograd of the family's
  own forward from the stream to the sites (one backward per receiver), on every position of
  a 13-token text with random gradients at the sites: Llama and Gemma 2 (RMSNorm, Gemma's
  1 + weight; GQA, rotary), GPT-2 (LayerNorm, fused c_attn stored transposed) and GPT-NeoX
  (LayerNorm, fused projection with the heads interleaved, partial rotary).
- Every edge's EAP score is the same with the sliced path as with the generic one.
- The layer's check refuses what would be wrong: a projection whose rows are not its heads'
  (the heads' rows of W_Q rolled by one head) takes the generic path; so does a family whose
  queries are not a projection's output (Qwen3's QK-norm).
"""

import dataclasses

import pytest
import torch
from test_attribution import _task
from test_path_patching import sharp

import headlab.circuits.attribution as attribution
from headlab.circuits.attribution import attribution_scores
from headlab.circuits.patching import Patcher
from headlab.circuits.receiver_grads import (
    output_grads_at,
    site_input_grads,
    sliced_receivers,
)
from headlab.models.hf import attach

LENGTH = 13
NORMS = {"llama": False, "gemma2": False, "gpt2": True, "gpt_neox": True}


def _patcher(family):
    clean, corrupted, metric = _task(length=LENGTH)
    return Patcher(attach(sharp(family).double()), clean, corrupted, metric)


def _receivers(attention):
    return [("q", h) for h in range(attention.num_heads)] + [
        (s, g) for s in ("k", "v") for g in range(attention.num_kv_heads)
    ]


@pytest.mark.parametrize("family", list(NORMS))
def test_sliced_gradients_equal_autograd(family):
    patcher = _patcher(family)
    layer = 1
    receivers = _receivers(patcher.runner.blocks[layer].attention)
    stream = patcher.clean.resid[layer]
    plan = sliced_receivers(patcher.runner, layer, receivers)
    assert plan is not None and plan.centred is NORMS[family]
    rows = slice(0, LENGTH)
    x = stream[:, rows]
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        seen = patcher.runner.values(layer, x, 1, rows=rows)
    site_grads = {
        s: torch.randn(seen[s].shape, generator=generator, dtype=torch.float64)
        for s in ("q", "k", "v")
    }
    want = site_input_grads(patcher.runner, layer, x, rows, site_grads, receivers)
    at_outputs = output_grads_at(patcher.runner, layer, x, rows, plan.modules, site_grads)
    got = plan.grads(x, at_outputs)
    scale = float(want.abs().max())
    assert scale > 1e-3
    # the families' norms compute in float32 inside a float64 model: their rounding, not ours
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_eap_scores_equal_the_generic_path(family, monkeypatch):
    patcher = _patcher(family)
    edges = list(patcher.graph.edges)
    sliced = attribution_scores(patcher, edges, [1.0])
    monkeypatch.setattr(attribution, "sliced_receivers", lambda *args: None)
    generic = attribution_scores(patcher, edges, [1.0])
    scale = float(generic.abs().max())
    assert scale > 1e-3
    torch.testing.assert_close(sliced, generic, rtol=0, atol=1e-6 * scale)


def test_the_check_refuses_rows_that_are_not_the_heads():
    patcher = _patcher("llama")
    attention = patcher.runner.blocks[1].attention
    receivers = _receivers(attention)
    assert sliced_receivers(patcher.runner, 1, receivers) is not None
    rows = attention.query.rows
    d = attention.head_dim
    rolled = rows[d:] + rows[:d]  # head h's rows read as head h - 1's
    attention.query = dataclasses.replace(attention.query, rows=rolled)
    assert sliced_receivers(patcher.runner, 1, receivers) is None


def test_queries_after_a_norm_take_the_generic_path():
    patcher = _patcher("qwen3")
    attention = patcher.runner.blocks[1].attention
    assert sliced_receivers(patcher.runner, 1, _receivers(attention)) is None
