"""Statistics of a model under an intervention are those of the intervened model.

Before the one kernel, ``head_statistics`` inside ``ablated(...)`` measured the model without the
ablation (its probes never passed the intervention sites): with MiniLM's layers 0 and 1 ablated,
layer 5's weights moved by up to 0.41 in ``trace_batch`` while its streamed entropy did not move
at all. Here every statistic under the ablation is checked against the same statistic computed
from the ablated model's own traces.
"""

from __future__ import annotations

import pytest
import torch

from headlab.attention.functional import entropy
from headlab.heads.ablation import ablated
from headlab.heads.statistics import head_statistics

TEXTS = [
    "Attention heads can be ablated before the output projection.",
    "Statistics of the ablated model must move with it.",
    "A third text, somewhat longer than the others, with commas, to pad the batch.",
]


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


def _check(model, heads, max_length, moved_layer):
    batch = model.tokenize(TEXTS, max_length)
    plain = head_statistics(model, TEXTS, max_length=max_length)
    with ablated(model, heads):
        measured = head_statistics(model, TEXTS, max_length=max_length)
        with torch.no_grad():
            _, traces = model.trace_batch(batch)
    want = _from_traces(traces, batch.attention_mask)
    for name, grid in want.items():
        torch.testing.assert_close(
            torch.tensor(measured.metrics[name]), torch.tensor(grid), atol=1e-5, rtol=1e-4
        )
    for layer, head in heads:  # an ablated head contributes nothing
        assert measured.metrics["contribution_norm"][layer][head] == 0.0
    moved = torch.tensor(measured.metrics["entropy"][moved_layer])
    before = torch.tensor(plain.metrics["entropy"][moved_layer])
    assert (moved - before).abs().max() > 1e-6  # the ablation shows downstream (was exactly 0)


@pytest.mark.model
def test_minilm_with_its_first_two_layers_ablated(minilm):
    _check(minilm, [(layer, h) for layer in (0, 1) for h in range(12)], 32, moved_layer=5)


def test_decoder_with_a_layer_ablated(tiny_llama):
    _check(tiny_llama, [(0, h) for h in range(6)] + [(1, 2)], 24, moved_layer=2)


@pytest.mark.model
def test_smollm2_with_heads_ablated(smollm2):
    _check(smollm2, [(0, h) for h in range(9)] + [(3, 4)], 24, moved_layer=29)
