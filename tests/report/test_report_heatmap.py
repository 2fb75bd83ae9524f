"""Heatmap data: encoding round-trips, long inputs are binned, shapes are checked."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from headlab.analysis.text_attention import words
from headlab.results.attention_views import AttentionView
from headlab.results.explorers import heatmap_data


def _decode(head: dict, bins: int) -> np.ndarray:
    q = np.frombuffer(base64.b64decode(head["data"]), dtype="<u2").reshape(bins, bins)
    return q * head["scale"] / 65535


def _row_stochastic(rng: np.random.Generator, *shape: int) -> np.ndarray:
    w = rng.random(shape) ** 3
    return w / w.sum(-1, keepdims=True)


def test_encoded_heads_round_trip_within_one_quantisation_step() -> None:
    rng = np.random.default_rng(5)
    w = _row_stochastic(rng, 2, 3, 13, 13)
    data = heatmap_data("t", [f"t{i}" for i in range(13)], [AttentionView("v", w)])
    assert data["bins"] == 13 and len(data["views"][0]["layers"]) == 2
    for l in range(2):
        for h in range(3):
            head = data["views"][0]["layers"][l][h]
            assert head["scale"] == pytest.approx(w[l, h].max())
            np.testing.assert_allclose(_decode(head, 13), w[l, h], atol=head["scale"] / 65535)


def test_long_input_is_binned_to_at_most_256() -> None:
    n = 2048
    w = np.full((1, 1, n, n), 1.0 / n)
    data = heatmap_data("t", ["w"] * n, [AttentionView("v", w)])
    assert data["bins"] == 256 and len(data["tokens"]) == n and data["edges"][-1] == n
    np.testing.assert_allclose(_decode(data["views"][0]["layers"][0][0], 256), 8 / n, rtol=1e-4)


def test_heatmap_data_rejects_wrong_shapes_and_empty_text() -> None:
    with pytest.raises(ValueError, match=r"\(layer, head, 3, 3\)"):
        heatmap_data("t", ["a", "b", "c"], [AttentionView("v", np.zeros((1, 2, 3, 4)))])
    with pytest.raises(ValueError, match="at least one word"):
        words("   ")


def test_total_tokens_records_a_cut_text() -> None:
    w = _row_stochastic(np.random.default_rng(2), 1, 1, 4, 4)
    assert heatmap_data("t", list("abcd"), [AttentionView("v", w)])["total_tokens"] == 4
    cut = heatmap_data("t", list("abcd"), [AttentionView("v", w)], total_tokens=900)
    assert cut["total_tokens"] == 900 and len(cut["tokens"]) == 4


@pytest.mark.model
def test_a_text_longer_than_the_encoder_is_cut_and_says_how_long_it_was(minilm) -> None:
    from headlab.heads.model_text_attention import model_text_attention

    text = " ".join(["heads"] * 600)
    seen = model_text_attention(minilm, text, max_tokens=512)  # MiniLM's own limit
    assert seen.cut and seen.total_tokens == 602  # 600 words, [CLS] and [SEP]
    assert seen.views[0].weights.shape[-1] == len(seen.tokens) == 512
    assert seen.views[1].weights.shape[:2] == (6, 1)  # the one-head view of every layer


def test_a_cut_reason_travels_to_the_page() -> None:
    w = np.full((1, 1, 4, 4), 0.25)
    data = heatmap_data(
        "t",
        list("abcd"),
        [AttentionView("v", w)],
        total_tokens=9,
        cut_reason="the page shows at most 4 of the 64 tokens m reads",
    )
    assert data["cut_reason"] == "the page shows at most 4 of the 64 tokens m reads"


def test_the_cells_a_page_holds_are_bounded_by_its_byte_budget() -> None:
    """Every head's weights travel in the page (uint16, base64): SmolLM2's 270 heads and their
    30 one-head views at 256 x 256 were 49 MB; within the budget the bins shrink instead."""
    from headlab.results.explorers import PAGE_BYTES, bins_within, encoded_bytes

    assert bins_within(30 * 9 + 30, 256) == 102
    assert encoded_bytes(300, 102) <= PAGE_BYTES < encoded_bytes(300, 103)
    assert bins_within(2 * 9, 256) == 256  # the seeded text's 2 x 9 heads: never binned further
    assert bins_within(10**6, 256) == 1
    for heads in (1, 7, 300, 1201):
        bins = bins_within(heads, 120)
        w = np.full((1, heads, 120, 120), 1 / 120, dtype=np.float32)
        data = heatmap_data("t", ["w"] * 120, [AttentionView("v", w)], max_bins=bins)
        assert data["bins"] == bins and (bins == 120 or heads >= 300)
        assert len(str(data["views"])) <= PAGE_BYTES + 60 * heads  # the JSON around each head
