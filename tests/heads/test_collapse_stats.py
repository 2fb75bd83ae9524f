"""Collapse (same weights, fewer heads) and per-head statistics."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.heads import collapse_heads, head_statistics

TEXTS = [
    "Heads attend to different things in a trained model.",
    "short text",
    "A much longer text, with punctuation; and clauses, so that positions differ a lot here.",
    "Ünïcödé café",
    "The last one.",
]


def test_collapse_original_count_is_exact(tiny):
    result = collapse_heads(tiny, TEXTS, (1, 3))
    rows = {r.num_heads: r for r in result.all_layers}
    assert (
        rows[3].measures["mean_cosine"] == pytest.approx(1.0, abs=1e-6)
        and rows[3].measures["nn_agreement"] == 1.0
    )
    assert rows[1].measures["mean_cosine"] < 0.9999
    assert [r.layer for r in result.per_layer] == [0, 1]
    doc = result.to_dict()
    assert set(doc["all_layers"][0]) == {"num_heads", "mean_cosine", "nn_agreement"}
    assert set(doc["per_layer"][0]) == {"layer", "num_heads", "mean_cosine", "nn_agreement"}


def test_statistics_independent_of_batching(tiny):
    one = head_statistics(tiny, TEXTS, batch_size=1)
    many = head_statistics(tiny, TEXTS, batch_size=4)
    for name, grid in one.metrics.items():
        torch.testing.assert_close(torch.tensor(many.metrics[name]), torch.tensor(grid))


def test_metric_names_known_before_running_are_those_measured(tiny):
    from headlab.heads.statistics import model_metric_names

    assert model_metric_names(tiny) == tuple(head_statistics(tiny, TEXTS[:2]).metrics)


def test_statistics_by_hand_on_one_text(tiny):
    text = TEXTS[2]
    stats = head_statistics(tiny, [text])
    _, traces = tiny.trace_batch(tiny.tokenize([text], 128))
    for layer, t in enumerate(traces):
        w = t.weights[0].double()  # (head, q_pos, k_pos)
        n = w.shape[-1]
        entropy = -(w * w.log()).sum(-1).mean(-1)
        prev = torch.stack([w[:, q, q - 1] for q in range(1, n)], dim=1).mean(-1)
        expect = {
            "entropy": entropy,
            "max_weight": w.max(-1).values.mean(-1),
            "cls": w[:, :, 0].mean(-1),
            "sep": w[:, :, n - 1].mean(-1),
            "self": torch.diagonal(w, dim1=-2, dim2=-1).mean(-1),
            "prev": prev,
            "contribution_norm": t.contributions[0].double().norm(dim=-1).mean(-1),
        }
        for name, values in expect.items():
            got = torch.tensor(stats.metrics[name][layer], dtype=torch.float64)
            torch.testing.assert_close(got, values, rtol=1e-5, atol=1e-6)
        assert (entropy <= math.log(n) + 1e-9).all()


@pytest.mark.model
def test_collapse_twelve_heads_is_the_original_exactly(minilm):
    texts = TEXTS[:3]
    batch = minilm.tokenize(texts)
    with torch.no_grad():
        assert torch.equal(minilm.with_head_view(12).run(batch), minilm.run(batch))
    result = collapse_heads(minilm, texts, (12,))
    assert result.all_layers[0].measures["mean_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert result.all_layers[0].measures["nn_agreement"] == 1.0


def test_collapse_checks_its_head_counts_before_any_work(tiny, monkeypatch):
    import headlab.heads.collapse as collapse_module

    def no_work(*args, **kwargs):
        raise AssertionError("ran the model before checking the head counts")

    monkeypatch.setattr(collapse_module, "reference", no_work)
    with pytest.raises(ValueError, match=r"head_counts 2 does not divide .* choose from 1,3"):
        collapse_heads(tiny, TEXTS, (1, 2))
    with pytest.raises(ValueError, match=r"--heads 2 does not divide"):
        collapse_module.check_head_counts(tiny, (2,), "--heads")


def test_collapse_reports_every_step_against_its_total(tiny):
    from headlab.heads import collapse_head_counts, collapse_steps

    seen = []
    result = collapse_heads(tiny, TEXTS, on_step=lambda done, total: seen.append((done, total)))
    counts = collapse_head_counts(tiny)
    assert counts == tuple(h for h in range(1, 4) if 3 % h == 0)  # tiny: 3 heads in each layer
    assert [r.num_heads for r in result.all_layers] == list(counts)
    total = 1 + len(counts) + tiny.num_layers  # the original, each count, each layer alone
    assert collapse_steps(tiny) == total
    assert seen == [(i, total) for i in range(1, total + 1)]
