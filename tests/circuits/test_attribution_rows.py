"""Edge attribution a block of positions at a time, as it runs at long context, against the
whole length at once (where both fit), and through the kernel's recomputing backward.

- Every edge's EAP score with the positions taken in blocks of 1, 2 and 5 rows (a text of 13
  tokens: the last block is short) equals the score with all 13 rows in one block, on Llama
  (GQA, rotary), Gemma 2 (post-norms: writes run through the block; soft-cap, sliding window),
  GPT-2 (learned positions) and GPT-NeoX (partial rotary, parallel MLP): a block of rows runs
  with its own position ids, and whole-length and blocked runs compute the same floats.
- The gradient of the metric through ``RecomputedAttention`` (the chunked path that recomputes
  each block's weights, which the kernel takes at long context for what SDPA cannot serve)
  gives the same EAP scores as autograd of the explicit path's whole weights (Gemma 2's
  soft-cap), and the recomputed path is the one that ran.
- Path patching's test of whether writes are linear, on a prefix of positions, answers as on
  the whole length.
- The products of the writes with the receivers' gradients, taken one or two receiver layers
  at a time, give the scores of all layers in one product.
"""

import pytest
import torch
from test_attribution import _task
from test_path_patching import sharp

import headlab.attention.kernel as kernel
import headlab.circuits.attribution as attribution
import headlab.circuits.patching as patching
from headlab.attention.chunked import RecomputedAttention
from headlab.circuits.attribution import attribution_scores
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach

LENGTH = 13


def _scores(model, task, rows=None):
    clean, corrupted, metric = task
    patcher = Patcher(model, clean, corrupted, metric)
    return attribution_scores(patcher, list(patcher.graph.edges), [1.0], rows=rows)


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2", "gpt_neox"])
def test_blocks_of_rows_equal_the_whole_length(family):
    task = _task(length=LENGTH)
    model = attach(sharp(family).double())
    whole = _scores(model, task)  # every row in one block at this length
    scale = float(whole.abs().max())
    assert scale > 1e-3
    for rows in (1, 2, 5):
        got = _scores(model, task, rows)
        torch.testing.assert_close(got, whole, rtol=0, atol=1e-9 * scale)


def test_recomputed_backward_equals_the_explicit_one(monkeypatch):
    task = _task(length=LENGTH)
    model = attach(sharp("gemma2").double())
    monkeypatch.setattr(kernel, "MIN_RECOMPUTED", 2**62)
    explicit = _scores(model, task, 5)
    calls = []
    apply = RecomputedAttention.apply

    def counted(*args):
        calls.append(args[0].shape)
        return apply(*args)

    monkeypatch.setattr(kernel, "MIN_RECOMPUTED", 1)
    monkeypatch.setattr(kernel.RecomputedAttention, "apply", counted)
    recomputed = _scores(model, task, 5)
    assert calls, "the recomputed path did not run"
    scale = float(explicit.abs().max())
    assert scale > 1e-3
    torch.testing.assert_close(recomputed, explicit, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize(("family", "linear"), [("llama", True), ("gemma2", False)])
def test_linearity_is_seen_on_a_prefix(family, linear, monkeypatch):
    clean, corrupted, metric = _task(length=LENGTH)
    model = attach(sharp(family))
    monkeypatch.setattr(patching, "LINEARITY_ROWS", 3)
    assert Patcher(model, clean, corrupted, metric).writes_are_linear() is linear


@pytest.mark.parametrize("per_product", [1, 2])
def test_products_of_fewer_layers_give_the_same_scores(per_product, monkeypatch):
    """The writes times the receivers' gradients, a few receiver layers per product (each cut
    to the senders before its last layer), equal every layer in one product."""
    task = _task(length=LENGTH)
    model = attach(sharp("llama").double())
    whole = _scores(model, task, 5)
    monkeypatch.setattr(attribution, "LAYERS_PER_PRODUCT", per_product)
    got = _scores(model, task, 5)
    scale = float(whole.abs().max())
    assert scale > 1e-3
    torch.testing.assert_close(got, whole, rtol=0, atol=1e-9 * scale)
