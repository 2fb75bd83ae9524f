"""Statistics of a model under an intervention are those of the intervened model.

Before the one kernel, ``head_statistics`` inside ``ablated(...)`` measured the model without the
ablation (its probes never passed the intervention sites): with MiniLM's layers 0 and 1 ablated,
layer 5's weights moved by up to 0.41 in ``trace_batch`` while its streamed entropy did not move
at all. Here every statistic under the ablation is checked against the same statistic computed
from the ablated model's own traces, for each ablation mode and for an intervention on the
weights (which takes the kernel's whole-matrix statistics branch); and on a decoder, the loss
(``objective``, ``ablation_effect``) and the importance under the intervention are checked
against the traces and the ablated heads.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from headlab.attention.functional import entropy
from headlab.attention.interventions import intervene
from headlab.heads.ablation import ablated, ablation_effect
from headlab.heads.importance import head_importance
from headlab.heads.statistics import head_statistics
from headlab.models.objectives import next_token_loss

TEXTS = [
    "Attention heads can be ablated before the output projection.",
    "Statistics of the ablated model must move with it.",
    "A third text, somewhat longer than the others, with commas, to pad the batch.",
]
REFERENCE = ["Other words give the mean output of each head.", "And a second reference text."]
# tiny_llama's vocabulary is t0 .. t96 (every other word is t0: all positions alike)
WORDS = [[f"t{(7 * i + 3 * j * j) % 97}" for j in range(9 + 4 * i)] for i in range(5)]
DECODER_TEXTS = [" ".join(w) for w in WORDS[:3]]
DECODER_REFERENCE = [" ".join(w) for w in WORDS[3:]]
MODES = ("zero", "mean", "resample", "weights")


def _on_first_key(weights: torch.Tensor) -> torch.Tensor:
    """Each row's whole weight moved onto the first key (rows of zeros stay zero)."""
    moved = torch.zeros_like(weights)
    moved[..., 0] = weights.sum(-1)
    return moved


@contextmanager
def _intervened(model, heads, mode, max_length, reference=REFERENCE):
    """``heads`` ablated in ``mode``, or (mode "weights") every weight of the first head's layer
    moved onto the first key, at the weights site."""
    if mode == "weights":
        with intervene(model.attention_layers()[heads[0][0]], "weights", _on_first_key):
            yield
        return
    with ablated(model, heads, mode=mode, reference_texts=reference, max_length=max_length):
        yield


def _from_traces(traces, mask: torch.Tensor) -> dict[str, list[list[float]]]:
    """Entropy, max weight and contribution norm per (layer, head), means over real tokens."""
    real = mask.double()[:, None, :]  # (batch, 1, q_pos)
    count = real.sum()
    out = {"entropy": [], "max_weight": [], "contribution_norm": []}
    for t in traces:
        w = t.weights.double()
        per_query = {
            "entropy": entropy(w),
            "max_weight": w.amax(-1),
            "contribution_norm": t.contributions.double().norm(dim=-1),
        }
        for name, value in per_query.items():
            out[name].append(((value * real).sum(dim=(0, 2)) / count).tolist())
    return out


def _check(model, heads, max_length, moved_layer, mode="zero", texts=TEXTS, reference=REFERENCE):
    """Statistics under the intervention against the intervened traces; returns the traces."""
    batch = model.tokenize(texts, max_length)
    plain = head_statistics(model, texts, max_length=max_length)
    with torch.no_grad():
        _, plain_traces = model.trace_batch(batch)
    with _intervened(model, heads, mode, max_length, reference):
        measured = head_statistics(model, texts, max_length=max_length)
        with torch.no_grad():
            _, traces = model.trace_batch(batch)
    want = _from_traces(traces, batch.attention_mask)
    for name, grid in want.items():
        torch.testing.assert_close(
            torch.tensor(measured.metrics[name]), torch.tensor(grid), atol=1e-5, rtol=1e-4
        )
    if mode == "zero":
        for layer, head in heads:  # an ablated head contributes nothing
            assert measured.metrics["contribution_norm"][layer][head] == 0.0
    moved = torch.tensor(measured.metrics["entropy"][moved_layer])
    before = torch.tensor(plain.metrics["entropy"][moved_layer])
    assert (moved - before).abs().max() > 1e-6  # the ablation shows downstream (was exactly 0)
    # the traces themselves moved: the intervention reached the explicit path too
    assert (traces[moved_layer].weights - plain_traces[moved_layer].weights).abs().max() > 1e-6
    return traces


@pytest.mark.model
def test_minilm_with_its_first_two_layers_ablated(minilm):
    _check(minilm, [(layer, h) for layer in (0, 1) for h in range(12)], 32, moved_layer=5)


def test_decoder_with_a_layer_ablated(tiny_llama):
    _check(tiny_llama, [(0, h) for h in range(6)] + [(1, 2)], 24, moved_layer=2)


@pytest.mark.model
def test_smollm2_with_heads_ablated(smollm2):
    _check(smollm2, [(0, h) for h in range(9)] + [(3, 4)], 24, moved_layer=29)


@pytest.mark.parametrize("mode", MODES)
def test_decoder_under_every_intervention(tiny_llama, mode):
    """Statistics, traces, the loss and the importance of the intervened decoder."""
    heads = [(0, h) for h in range(6)] + [(1, 2)] if mode != "weights" else [(1, 0)]
    traces = _check(
        tiny_llama,
        heads,
        24,
        moved_layer=2,
        mode=mode,
        texts=DECODER_TEXTS,
        reference=DECODER_REFERENCE,
    )
    if mode in ("zero", "mean"):  # the traces show the replaced outputs
        for layer, head in heads:
            outputs = traces[layer].head_outputs[:, head]  # (batch, q_pos, d_head)
            assert torch.allclose(outputs, outputs[:1, :1].expand_as(outputs))
            assert (outputs == 0).all() == (mode == "zero")
    batch = tiny_llama.tokenize(DECODER_TEXTS, 24)
    with torch.no_grad():
        plain = float(tiny_llama.objective(DECODER_TEXTS, None, 24))
    with _intervened(tiny_llama, heads, mode, 24, DECODER_REFERENCE), torch.no_grad():
        loss = float(tiny_llama.objective(DECODER_TEXTS, None, 24))  # fused path, sites outside
        logits, _ = tiny_llama.trace_batch(batch)  # explicit path
    assert loss == pytest.approx(float(next_token_loss(logits, batch)), rel=1e-5)
    assert abs(loss - plain) > 1e-6
    if mode != "weights":
        effect = ablation_effect(
            tiny_llama,
            DECODER_TEXTS,
            heads,
            mode=mode,
            max_length=24,
            reference_texts=DECODER_REFERENCE,
            batch_size=3,
        )
        assert effect.baseline == pytest.approx(plain, rel=1e-6)
        assert effect.ablated == pytest.approx(loss, rel=1e-6)
    importance = head_importance(tiny_llama, DECODER_TEXTS, batch_size=3, max_length=24)
    with _intervened(tiny_llama, heads, mode, 24, DECODER_REFERENCE):
        under = head_importance(tiny_llama, DECODER_TEXTS, batch_size=3, max_length=24)
    if mode in ("zero", "mean"):  # an output replaced by a constant has no gradient
        for layer, head in heads:
            assert under.raw[layer][head] == 0.0 and importance.raw[layer][head] > 0.0
    assert under.raw != importance.raw
