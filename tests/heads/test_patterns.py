"""Trained heads' attention patterns as square targets for the expressivity fit."""

import numpy as np
import pytest
import torch

from headlab.heads.patterns import head_patterns

TEXTS = ["the cat sat on the mat by the door", "a", "heads share their key and query spaces"]


def test_patterns_are_heads_of_the_trace(tiny):
    pats = head_patterns(tiny, TEXTS, 6, count=4, seed=1)
    assert pats.shape == (4, 6, 6) and pats.dtype == np.float64
    np.testing.assert_allclose(pats.sum(-1), 1.0, rtol=1e-6)
    # every pattern is one (layer, text, head) of the model's own trace on the cut texts
    batch = tiny.tokenize([TEXTS[0], TEXTS[2]], max_length=6)
    with torch.inference_mode():
        _, traces = tiny.trace_batch(batch)
    pool = [t.weights[b, h].double().numpy() for t in traces for b in range(2) for h in range(3)]
    for p in pats:
        assert any(np.allclose(p, q, rtol=1e-6, atol=1e-9) for q in pool)


def test_no_text_long_enough(tiny):
    with pytest.raises(ValueError, match="no text of the corpus has 30 tokens"):
        head_patterns(tiny, ["a b"], 30, count=2)


def test_patterns_by_length_gives_one_set_per_length(tiny):
    from headlab.heads.patterns import patterns_by_length

    pats = patterns_by_length(tiny, TEXTS, (4, 6), count=3, seed=1)
    assert sorted(pats) == [4, 6]
    for n, p in pats.items():
        np.testing.assert_array_equal(p, head_patterns(tiny, TEXTS, n, count=3, seed=1))


def test_patterns_by_length_reports_each_length(tiny):
    from headlab.heads.patterns import patterns_by_length

    steps: list[tuple[int, int]] = []
    patterns_by_length(tiny, TEXTS, (4, 6), count=2, on_step=lambda d, t: steps.append((d, t)))
    assert steps == [(1, 2), (2, 2)]
