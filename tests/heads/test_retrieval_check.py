"""The retrieval check masks exactly what it says: k heads, against k random others."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headlab.heads.kv_budget import kv_budget
from headlab.heads.retrieval_check import chosen_heads

PASSAGE = " ".join(f"t{(11 * i) % 97}" for i in range(12))


def _text(seed: int) -> str:
    filler = " ".join(f"t{(7 * i + seed) % 89}" for i in range(30))
    return f"t1 {PASSAGE} {filler} {PASSAGE}"


@pytest.mark.parametrize("k", [10, 18, 19])
def test_a_k_that_leaves_too_few_others_is_refused_before_any_run(tiny_llama, k):
    steps: list[tuple[int, int]] = []
    # 3 layers x 6 heads: k masked and k random others need k <= 9
    with pytest.raises(ValueError, match=rf"retrieval_k must be between 1 and 9 .*18 heads.*{k}"):
        kv_budget(
            tiny_llama,
            budgets=(0.5,),
            sinks=2,
            window=8,
            calibration_text=_text(5),
            evaluation_text=_text(3),
            retrieval_k=k,
            on_step=lambda d, t: steps.append((d, t)),
        )
    assert steps == []


def test_the_largest_k_draws_every_other_head(tiny_llama):
    result = kv_budget(
        tiny_llama,
        budgets=(0.5,),
        sinks=2,
        window=8,
        calibration_text=_text(5),
        evaluation_text=_text(3),
        retrieval_k=9,
    )
    check = result.retrieval
    masked = {tuple(h) for h in check.heads}
    assert check.k == 9 and len(masked) == 9
    every = {(layer, h) for layer in range(3) for h in range(6)}
    for drawn in check.random_heads:  # 9 of the 9 others: all of them, each time
        assert len(drawn) == 9 and {tuple(h) for h in drawn} == every - masked


scores_grid = st.integers(1, 4).flatmap(
    lambda heads: st.lists(
        st.lists(st.floats(0, 1, allow_nan=False), min_size=heads, max_size=heads),
        min_size=1,
        max_size=4,
    )
)


@given(scores_grid, st.data())
def test_chosen_heads_are_the_k_best_and_the_note_says_how_k_was_chosen(scores, data):
    total = sum(map(len, scores))
    most = total // 2
    asked = data.draw(st.one_of(st.none(), st.integers(1, max(most, 1))))
    heads, note = chosen_heads(scores, asked, max(most, 1))
    flat = sorted((v for row in scores for v in row), reverse=True)
    scoring = sum(v >= 0.1 for v in flat)
    want = asked if asked is not None else min(max(scoring, 1), max(most, 1))
    assert len(heads) == want == len(set(heads))
    # the chosen scores are the `want` highest (ties may pick either head)
    assert sorted((scores[layer][h] for layer, h in heads), reverse=True) == flat[:want]
    if asked is None and scoring == 0:
        assert note.startswith("no head scores >= 0.1")
    elif asked is None and scoring > max(most, 1):
        assert note.startswith(f"{scoring} heads score >= 0.1; masked the top {most}")
    else:
        assert note == ""
