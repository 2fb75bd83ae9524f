"""EAP's clean gradient run, which also makes the clean run's cache (one forward fewer).

- The Cache it keeps (the stream entering each block and leaving the last, head outputs, MLP
  outputs, the metric's logits) equals ``Runner.cache``'s, a forward of its own without
  gradients, on Llama and GPT-NeoX (parallel MLP).
- ``edge_attribution``'s EAP, which takes that path, gives every edge the scores (and the
  clean and corrupted metric) of ``attribution_scores`` on a ``Patcher`` made the usual way;
  a KL metric, which needs the clean logits before the run, takes the usual way.
"""

import pytest
import torch
from test_attribution import _task
from test_path_patching import sharp

import headlab.circuits.attribution as attribution
from headlab.circuits.attribution import _clean_run, attribution_scores, edge_attribution
from headlab.circuits.metrics import kl_to_clean
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_the_clean_run_keeps_the_cache(family):
    clean, corrupted, metric = _task(length=11)
    model = attach(sharp(family).double())
    usual = Patcher(model, clean, corrupted, metric)
    prepared: dict = {}
    folded = Patcher(model, clean, corrupted, metric, clean_run=_clean_run(metric, None, prepared))
    assert "run" in prepared
    want, got = usual.clean, folded.clean
    pairs = [(want.logits, got.logits)]
    pairs += list(zip(want.resid, got.resid, strict=True))
    pairs += list(zip(want.head_outputs, got.head_outputs, strict=True))
    pairs += [(a, b) for a, b in zip(want.mlp, got.mlp, strict=True) if a is not None]
    for a, b in pairs:
        assert not b.requires_grad
        torch.testing.assert_close(b, a, rtol=0, atol=1e-10 * float(a.abs().max()))


def test_eap_scores_with_and_without_the_folded_run():
    clean, corrupted, metric = _task(length=11)
    model = attach(sharp("llama").double())
    patcher = Patcher(model, clean, corrupted, metric)
    want = attribution_scores(patcher, list(patcher.graph.edges), [1.0])
    got = edge_attribution(model, clean, corrupted, metric)
    scale = float(want.abs().max())
    assert scale > 1e-3
    torch.testing.assert_close(
        torch.tensor(got.scores, dtype=torch.float64), want, rtol=0, atol=1e-9 * scale
    )
    assert got.clean_metric == pytest.approx(patcher.clean_value, abs=1e-12)
    assert got.corrupted_metric == pytest.approx(patcher.corrupted_value, abs=1e-12)


def test_a_kl_metric_takes_the_usual_way(monkeypatch):
    clean, corrupted, _ = _task(length=11)
    mask = torch.zeros(clean.shape, dtype=torch.bool)
    mask[:, 4:8] = True
    kl = kl_to_clean(mask)
    model = attach(sharp("llama").double())
    patcher = Patcher(model, clean, corrupted, kl)
    want = attribution_scores(patcher, list(patcher.graph.edges), [1.0])

    def refuse(*_args):
        raise AssertionError("the folded run cannot serve a KL metric")

    monkeypatch.setattr(attribution, "clean_gradient_run", refuse)
    got = torch.tensor(edge_attribution(model, clean, corrupted, kl).scores, dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9 * max(float(want.abs().max()), 1e-9))
