"""Head analyses on a decoder (GQA, rotary, causal) through the HeadModel interface: the
tiny random Llama on the production route (tests/conftest.py's ``tiny_llama``)."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.attention import MultiHeadAttention
from headlab.attention.head_groups import HeadGroupView, grouped_view
from headlab.heads import (
    collapse_heads,
    collapsed,
    detect_heads,
    head_importance,
    head_statistics,
    prune_heads,
)
from headlab.heads.detectors import detector_scores
from headlab.heads.pruning import unique_parameters
from headlab.models import HeadModel
from headlab.models.head_mask import as_mask

TEXTS = [" ".join(f"t{(7 * i + j * j) % 97}" for j in range(5 + i % 7)) for i in range(9)]


def test_both_model_families_are_head_models(tiny, tiny_llama):
    assert isinstance(tiny, HeadModel) and isinstance(tiny_llama, HeadModel)
    assert not tiny.causal and tiny_llama.causal


def logits(model, batch, head_mask=None):
    with torch.no_grad():
        return model.run(batch, head_mask)


@pytest.mark.parametrize(
    "removed",
    [{0: [0]}, {0: [0, 1, 2]}, {1: [1, 4], 2: [5]}, {0: [0, 1, 2, 3, 4, 5]}, {2: [0, 2, 4]}],
)
def test_pruning_equals_masking_the_same_heads(tiny_llama, removed):
    """Even and uneven K/V groups, a whole K/V group, a whole layer: exactly the head mask."""
    batch = tiny_llama.tokenize(TEXTS[:4])
    pruned = prune_heads(tiny_llama, removed)
    torch.testing.assert_close(
        logits(pruned, batch),
        logits(tiny_llama, batch, as_mask(tiny_llama, removed)),
        atol=1e-5,
        rtol=1e-5,
    )
    expected_heads = [6 - len(removed.get(i, [])) for i in range(3)]
    assert pruned.heads_per_layer == expected_heads


def test_a_kv_head_goes_with_its_last_query_head(tiny_llama):
    layer = tiny_llama.attention_layers()[0]
    d, e = layer.head_dim, layer.embed_dim
    whole_group = tiny_llama.without_heads({0: [0, 1, 2]})  # every reader of K/V head 0
    assert (whole_group.heads_per_layer[0], whole_group.kv_heads_per_layer[0]) == (3, 1)
    uneven = tiny_llama.without_heads({0: [0]}).attention_layers()[0]  # groups of 2 and 3
    assert (uneven.num_heads, uneven.num_kv_heads) == (5, 5)  # K/V copied per query head
    assert uneven.copied_parameters == 2 * 3 * d * e  # the 3 copies of K and V rows, once
    model = tiny_llama.without_heads({0: [0]})
    full = tiny_llama.parameter_count()
    assert unique_parameters(model) == full - 2 * d * e  # one query head's W_Q rows, W_O columns


def test_group_view_equals_with_num_heads_on_plain_attention():
    torch.manual_seed(3)
    attention = MultiHeadAttention(24, 6, batch_first=True).eval()
    x = torch.randn(2, 7, 24)
    for h in (1, 2, 3):
        expected, _ = attention.with_num_heads(h)(x, x, x, need_weights=False)
        got, _ = HeadGroupView(attention, h)(x, x, x, need_weights=False)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert grouped_view(attention, 6) is attention


def test_collapse_of_a_decoder_reports_perplexity_and_the_original_exactly(tiny_llama):
    result = collapse_heads(tiny_llama, TEXTS, (1, 2, 6), max_length=32)
    rows = {r.num_heads: r.measures for r in result.all_layers}
    assert set(rows[6]) == {"perplexity", "next_token_agreement"}
    assert rows[6]["next_token_agreement"] == 1.0
    ppl = rows[6]["perplexity"]
    batch = tiny_llama.tokenize(TEXTS, 32)
    with torch.no_grad():
        loss = tiny_llama.objective(TEXTS, max_length=32)
    assert ppl == pytest.approx(math.exp(float(loss)), rel=1e-5)
    assert rows[1]["next_token_agreement"] < 1.0
    assert len(result.per_layer) == 3 and batch.input_ids.shape[0] == len(TEXTS)
    one = collapsed(tiny_llama, 2, [1])
    assert one.heads_per_layer == [6, 2, 6]


def test_statistics_of_a_decoder_equal_an_independent_computation(tiny_llama):
    stats = head_statistics(tiny_llama, TEXTS[:5], batch_size=2, max_length=32)
    assert set(stats.metrics) >= {"first", "entropy", "distance", "prev", "self"}
    sums = {"first": torch.zeros(3, 6, dtype=torch.float64), "distance": torch.zeros(3, 6)}
    count = 0
    for text in TEXTS[:5]:
        batch = tiny_llama.tokenize([text], 32)
        with torch.no_grad():
            _, traces = tiny_llama.trace_batch(batch)
        n = batch.input_ids.shape[1]
        count += n
        for layer, t in enumerate(traces):
            w = t.weights[0].double()  # (head, q, k)
            sums["first"][layer] += w[:, :, 0].sum(-1)
            gaps = (torch.arange(n)[:, None] - torch.arange(n)).abs().double()
            sums["distance"][layer] += (w * gaps).sum(dim=(-1, -2))
    for name, total in sums.items():
        torch.testing.assert_close(
            torch.tensor(stats.metrics[name]), (total / count).float(), atol=1e-5, rtol=1e-5
        )


def test_detector_scores_of_constructed_weights():
    n = 5
    positions = torch.arange(2 * n)
    prev = torch.zeros(1, 1, 2 * n, 2 * n)
    prev[0, 0, positions[1:], positions[:-1]] = 1.0
    prev[0, 0, 0, 0] = 1.0
    induction = torch.zeros(1, 1, 2 * n, 2 * n)
    induction[0, 0, n + torch.arange(n - 1), torch.arange(1, n)] = 1.0
    scores = detector_scores(torch.cat([prev, induction], dim=1), n)
    assert scores["previous_token"].tolist() == [1.0, 0.0]
    assert scores["induction"].tolist() == [0.0, 1.0]
    assert scores["duplicate_token"].tolist() == [0.0, 0.0]


def test_detectors_run_on_a_decoder_and_stay_in_range(tiny_llama):
    scores = detect_heads(tiny_llama, torch.arange(5, 90), 11, count=3)
    for grid in scores.values():
        values = torch.tensor(grid)
        assert values.shape == (3, 6) and (values >= 0).all() and (values <= 1).all()


@pytest.mark.parametrize(
    ("positions", "length"), [(4096, 50), (100, 50), (99, 49), (64, 32), (5, 2), (3, 0)]
)
def test_the_default_detector_length_fits_twice(positions, length):
    from types import SimpleNamespace

    from headlab.heads.detectors import check_length, default_length

    model = SimpleNamespace(max_positions=positions)
    assert default_length(model) == length
    if length:
        assert check_length(model, length) == length
        half = positions // 2
        with pytest.raises(ValueError, match=f"detector_length must be between 2 and {half}"):
            check_length(model, half + 1)
    else:
        with pytest.raises(ValueError, match="the detectors need 4 positions"):
            check_length(model, 2)


def test_a_detector_length_that_does_not_fit_is_refused_before_the_corpus_runs(tiny_llama):
    """64 positions: 33 tokens twice do not fit; no batch runs (on_batch is never called)."""
    batches = []
    with pytest.raises(ValueError, match="detector_length must be between 2 and 32, got 33"):
        head_statistics(tiny_llama, TEXTS, detector_length=33, on_batch=batches.append)
    assert batches == []


def test_importance_of_a_head_without_output_is_zero(tiny_llama_dir):
    from headlab.models import load

    model = load(tiny_llama_dir)  # its own copy: head 4 of layer 1 silenced (W_O columns 0)
    d = model.attention_layers()[1].head_dim
    with torch.no_grad():
        model.model.model.layers[1].self_attn.o_proj.weight[:, 4 * d : 5 * d] = 0
    result = head_importance(model, TEXTS, batch_size=3, max_length=32)
    assert result.raw[1][4] == 0.0 and all(v > 0 for v in result.raw[0])
    assert result.objective.startswith("next-token cross-entropy")


def test_the_library_measures_the_detectors_by_default_as_the_command_does(tiny_llama):
    """head_statistics' default detector length is ``model heads``' (default_length), so the
    detectors are in its result and equal detect_heads at that length; with 0 they are absent
    and asking for one says what to pass."""
    from headlab.heads.detectors import default_length
    from headlab.results.head_statistics import MissingStatistic

    stats = head_statistics(tiny_llama, TEXTS[:3], max_length=32)
    assert set(stats.detectors) == {"previous_token", "duplicate_token", "induction"}
    seen = torch.cat([tiny_llama.tokenize([t], 32).input_ids[0] for t in TEXTS[:3]]).unique()
    want = detect_heads(tiny_llama, seen, default_length(tiny_llama))
    for name, grid in want.items():
        assert torch.tensor(stats.detectors[name]) == pytest.approx(torch.tensor(grid), abs=1e-6)
    assert stats.top("induction", 1)[0][2] == pytest.approx(max(map(max, want["induction"])))
    without = head_statistics(tiny_llama, TEXTS[:3], max_length=32, detector_length=0)
    with pytest.raises(MissingStatistic, match="detector_length=50") as raised:
        without.top("induction")
    assert isinstance(raised.value, KeyError) and "entropy" in str(raised.value)
