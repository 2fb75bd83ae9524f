"""Every analysis runs on a third model family made of the interface alone.

``Toy`` (tests/toy_family.py) is a tiny model written for these tests: its own attention module
(not headlab's ``MultiHeadAttention``; it calls the kernel, as any family behind headlab's
registered transformers function does), its own tokenizer, its own views and edits. It
implements ``HeadModel`` and nothing more, so each analysis that runs on it uses nothing but the
interface. Its statistics are checked against its recorded weights.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from headlab.attention.functional import entropy
from headlab.heads import (
    collapse_heads,
    detect_heads,
    head_importance,
    head_statistics,
    prune_by_importance,
)
from headlab.heads.ablation import ablated, ablation_effect
from headlab.heads.corpus_sums import corpus_result, document_sums, merge_sums
from headlab.heads.kv_budget import kv_budget
from headlab.heads.long_context import long_text_statistics
from headlab.heads.model_text_attention import model_text_attention
from headlab.heads.patterns import patterns_by_length
from headlab.heads.pruning import prune_heads
from headlab.heads.redundancy import measure_redundancy
from headlab.heads.tracing import attention_weights
from headlab.models.interface import AttentionLayer, HeadModel
from headlab.results.corpus_roles_result import RoleRequest
from toy_family import LAYERS, VOCAB, E, H, Toy

TEXTS = [" ".join(f"w{(5 * i + 3 * j) % 23}" for j in range(6 + i % 9)) for i in range(12)]


@pytest.fixture(scope="module")
def toy() -> Toy:
    return Toy.build()


def test_the_toy_is_a_head_model(toy):
    assert isinstance(toy, HeadModel)
    assert all(isinstance(a, AttentionLayer) for a in toy.attention_layers())


def test_statistics_equal_the_recorded_weights(toy):
    result = head_statistics(toy, TEXTS, max_length=20, detector_length=6)
    assert result.first_token == "start"
    assert set(result.detectors) == {"previous_token", "duplicate_token", "induction"}
    batch = toy.tokenize(TEXTS, 20)
    _, weights = attention_weights(toy, batch)
    real = batch.attention_mask.double()[:, None, :]
    for layer, w in enumerate(weights):
        w = w.double()
        want = (entropy(w) * real).sum(dim=(0, 2)) / real.sum()
        got = torch.tensor(result.metrics["entropy"][layer], dtype=torch.float64)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        first = (w[..., 0] * real).sum(dim=(0, 2)) / real.sum()
        got = torch.tensor(result.metrics["start"][layer], dtype=torch.float64)
        torch.testing.assert_close(got, first, atol=1e-5, rtol=1e-5)


def test_every_analysis_runs_on_the_interface_alone(toy):
    detect_heads(toy, torch.arange(VOCAB), 5)
    long = long_text_statistics(toy, " ".join(TEXTS), max_tokens=35)
    assert long.result().findings.heads == LAYERS * H
    importance = head_importance(toy, TEXTS, batch_size=6, max_length=16)
    assert len(importance.ranking()) == LAYERS * H
    for mode in ("zero", "mean", "resample"):
        effect = ablation_effect(
            toy, TEXTS, [(0, 1), (1, 3)], mode=mode, batch_size=6, max_length=16
        )
        assert effect.ablated != effect.baseline
    collapse = collapse_heads(toy, TEXTS, (1, 2, 4), max_length=16)
    full = next(r for r in collapse.all_layers if r.num_heads == H)
    assert full.measures["next_token_agreement"] == 1.0
    pruned = prune_by_importance(toy, TEXTS, fractions=(0.0, 0.5, 1.0), max_length=16)
    counts = [s.params for s in pruned.steps if s.order == "importance"]
    assert counts[0] > counts[1] > counts[2]
    redundancy = measure_redundancy(toy, TEXTS, ranks=(E, 3), max_length=16, batch_size=6)
    original = next(p for p in redundancy.curve if p.original).measures["perplexity"]
    exact = next(p for p in redundancy.curve if p.rank == E and not p.original)
    assert exact.measures["perplexity"] == pytest.approx(original, rel=1e-5)
    text = model_text_attention(toy, TEXTS[3])
    assert [v.name for v in text.views] == ["4 heads", "1 head, same weights"]
    patterns = patterns_by_length(toy, TEXTS, (6,), count=3)
    assert patterns[6].shape == (3, 6, 6)


# --------------------------------------------------------------------------- every variant
VARIANTS = {
    "plain": {},
    "gqa": {"kv_heads": 2},  # 4 query heads on 2 K/V heads
    "contrastive": {"causal": False, "objective_kind": "contrastive"},
    "none": {"causal": False, "objective_kind": "none"},
    "mlp": {"mlp": True},  # blocks with an MLP after the attention (the run protocol's sites)
}
DOCUMENT = " ".join(f"w{(7 * j) % 19}" for j in range(16))
PASSAGE = " ".join(f"p{(11 * j) % 17}" for j in range(9))
REPEAT = f"{PASSAGE} {DOCUMENT} {PASSAGE}"  # 34 words: the passage again at the end


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request) -> Toy:
    return Toy.build(seed=1, **VARIANTS[request.param])


def _real_rows(weights: torch.Tensor, batch) -> torch.Tensor:
    """Row sums of (batch, head, q_pos, k_pos) weights at the real queries."""
    return weights.sum(-1).permute(0, 2, 1)[batch.attention_mask]  # (real queries, head)


def test_every_variant_is_a_head_model(variant):
    assert isinstance(variant, HeadModel)
    assert variant.kv_heads_per_layer == [a.num_kv_heads for a in variant.attention_layers()]


def test_statistics_and_weights_of_every_variant(variant):
    result = head_statistics(variant, TEXTS, max_length=20, detector_length=6)
    assert set(result.detectors) == (
        {"previous_token", "duplicate_token", "induction"} if variant.causal else set()
    )
    batch = variant.tokenize(TEXTS, 20)
    _, weights = attention_weights(variant, batch)
    real = batch.attention_mask.double()[:, None, :]
    last = batch.attention_mask.sum(1) - 1
    for layer, w in enumerate(weights):
        w = w.double()  # (batch, head, q_pos, k_pos)
        # float32 weights: each row's sum is 1 up to float32 rounding (seen: 2e-7 over 20 keys)
        torch.testing.assert_close(
            _real_rows(w, batch),
            torch.ones(int(real.sum()), H, dtype=torch.float64),
            atol=1e-6,
            rtol=0,
        )
        if variant.causal:
            assert (w.triu(1) == 0).all()
        else:  # a non-causal query puts weight on later keys
            assert w.triu(1).sum() > 0
        on_last = w[torch.arange(len(TEXTS)), :, :, last]  # (batch, head, q_pos)
        for name, want in (("entropy", entropy(w)), ("start", w[..., 0]), ("last", on_last)):
            want = (want * real).sum(dim=(0, 2)) / real.sum()
            got = torch.tensor(result.metrics[name][layer], dtype=torch.float64)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_statistics_of_every_variant_under_ablation(variant, mode):
    heads = [(0, 1), (0, 2)]
    batch = variant.tokenize(TEXTS, 20)
    plain = head_statistics(variant, TEXTS, max_length=20)
    with ablated(variant, heads, mode=mode, reference_texts=TEXTS[:4], max_length=20):
        measured = head_statistics(variant, TEXTS, max_length=20)
        _, weights = attention_weights(variant, batch)
    real = batch.attention_mask.double()[:, None, :]
    want = (entropy(weights[1].double()) * real).sum(dim=(0, 2)) / real.sum()
    got = torch.tensor(measured.metrics["entropy"][1], dtype=torch.float64)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert measured.metrics["entropy"][1] != plain.metrics["entropy"][1]  # moved downstream
    if mode == "zero":
        assert all(measured.metrics["contribution_norm"][0][h] == 0.0 for _, h in heads)


def test_pruned_heads_compute_what_the_head_mask_computes(variant):
    removed = {0: [1], 1: [0, 3]}
    pruned = prune_heads(variant, removed)
    assert pruned.heads_per_layer == [3, 2]
    if variant.kv_heads_per_layer == [H] * LAYERS:  # with GQA kept heads copy their K/V rows
        assert pruned.parameter_count() < variant.parameter_count()
    mask = torch.ones(LAYERS, H)
    for layer, heads in removed.items():
        mask[layer, heads] = 0.0
    batch = variant.tokenize(TEXTS, 20)
    with torch.no_grad():
        torch.testing.assert_close(pruned.run(batch), variant.run(batch, mask))


def test_analyses_that_need_an_objective(variant):
    """They run and agree with the model itself where the variant has an objective, and refuse
    with a ValueError where it has none."""
    kind = variant.objective_kind
    analyses = {
        "importance": lambda: head_importance(variant, TEXTS, batch_size=6, max_length=16),
        "ablation": partial(ablation_effect, variant, TEXTS, [(0, 1)], batch_size=6, max_length=16),
        "collapse": lambda: collapse_heads(variant, TEXTS, (1, 2, 4), max_length=16),
        "prune": partial(prune_by_importance, variant, TEXTS, fractions=(0.0, 0.5), max_length=16),
        "redundancy": lambda: measure_redundancy(variant, TEXTS, ranks=(E, 3), max_length=16),
    }
    if kind == "none":
        for analysis in analyses.values():
            with pytest.raises(ValueError, match="objective"):
                analysis()
        return
    same = {"next_token_agreement": 1.0} if kind == "next-token" else {"nn_agreement": 1.0}
    importance = analyses["importance"]()
    for raw, normalised in zip(importance.raw, importance.importance, strict=True):
        assert all(r > 0 and math.isfinite(r) for r in raw)
        assert math.fsum(v * v for v in normalised) == pytest.approx(1.0)
    effect = analyses["ablation"]()
    assert math.isfinite(effect.ablated) and effect.ablated != effect.baseline
    collapse = analyses["collapse"]()
    full = next(r for r in collapse.all_layers if r.num_heads == H)
    for name, value in same.items():
        assert full.measures[name] == value
    pruned = analyses["prune"]()
    for step in pruned.steps:
        if step.heads_pruned == 0:  # nothing pruned: the model itself
            for name, value in same.items():
                assert step.measures[name] == value
        else:
            assert step.heads_pruned == round(0.5 * LAYERS * H)
    redundancy = analyses["redundancy"]()
    original = next(p for p in redundancy.curve if p.original).measures
    exact = next(p for p in redundancy.curve if p.rank == E and not p.original).measures
    for name, value in original.items():
        assert exact[name] == pytest.approx(value, rel=1e-5)


def test_long_text_corpus_sums_and_kv_budget(variant):
    options = RoleRequest(sinks=2, window=6, min_match=4)
    window = (options.sinks, options.window)
    long = long_text_statistics(variant, REPEAT, window=window, min_match=options.min_match)
    assert long.result().findings.heads == LAYERS * H
    groups = long.roles.group_window_error
    assert [len(row) for row in groups] == variant.kv_heads_per_layer
    assert long.roles.copy_positions == 9 - options.min_match
    assert (long.roles.retrieval is not None) == (variant.objective_kind == "next-token")
    parts = [document_sums(variant, text, options) for text in (REPEAT, DOCUMENT)]
    assert all(p.predicts == (variant.objective_kind == "next-token") for p in parts)
    one = corpus_result(merge_sums(parts[:1]), options)
    assert one.statistics == long.statistics  # one document: the long text's means, exactly
    total = merge_sums(parts)
    assert total.documents == 2 and total.n_queries == sum(p.n_queries for p in parts)
    corpus = corpus_result(total, options)
    for name, grid in corpus.statistics.metrics.items():  # token-weighted means of the parts
        for layer, row in enumerate(grid):
            for head, value in enumerate(row):
                want = sum(p.sums[name][layer][head] for p in parts)
                count = total.n_prev if name == "prev" else total.n_queries
                assert value == pytest.approx(want / count, rel=1e-9, abs=1e-12), name
    budget = partial(
        kv_budget,
        variant,
        budgets=(0.5,),
        n_tokens=34,
        sinks=2,
        window=6,
        seeds=3,
        calibration_text=REPEAT,
        evaluation_text=REPEAT,
    )
    if variant.objective_kind != "next-token":
        with pytest.raises(ValueError, match="predicts no tokens"):
            budget()
        return
    result = budget()
    groups_total = sum(variant.kv_heads_per_layer)
    assert sorted((r[0], r[1]) for r in result.group_ranking) == [
        (layer, g) for layer, n in enumerate(variant.kv_heads_per_layer) for g in range(n)
    ]
    kinds = ["full", "chosen", "random", "random", "random", "opposite"]  # at least 3 seeds
    assert [r.kind for r in result.runs] == kinds
    for run in result.runs[1:]:
        assert len(run.groups) == round(0.5 * groups_total) and run.kv_saved > 1.0
        assert math.isfinite(run.perplexity) and 0.0 <= run.copy_accuracy <= 1.0
    chosen = result.runs[1]
    assert [list(g[:2]) for g in result.group_ranking[: len(chosen.groups)]] == chosen.groups


#: Words of the tiny transformers checkpoints' vocabulary (tests/models/hf_families.py).
HF_TEXTS = [" ".join(f"w{(5 * i + 3 * j) % 97 + 1}" for j in range(6 + i % 9)) for i in range(12)]


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_every_analysis_runs_on_a_transformers_model(name, hf_loaded):
    """The same analyses on ``TransformersModel`` (a tiny Llama: 6 query heads on 2 K/V heads;
    a tiny BERT encoder), which implements the interface for any transformers family."""
    from headlab.heads.kv_budget import kv_budget
    from headlab.models.hf import TransformersModel

    model = hf_loaded(name)
    assert isinstance(model, TransformersModel) and isinstance(model, HeadModel)
    assert all(isinstance(a, AttentionLayer) for a in model.attention_layers())
    layers, heads = model.num_layers, sum(model.heads_per_layer)
    result = head_statistics(model, HF_TEXTS, max_length=20, detector_length=6)
    assert result.first_token == "first" and len(result.metrics["entropy"]) == layers
    assert bool(result.detectors) == model.causal
    detect_heads(model, torch.arange(1, 90), 5)
    long = long_text_statistics(model, " ".join(HF_TEXTS), max_tokens=60)
    assert long.result().findings.heads == heads
    importance = head_importance(model, HF_TEXTS, batch_size=6, max_length=16)
    assert len(importance.ranking()) == heads
    for mode in ("zero", "mean", "resample"):
        effect = ablation_effect(
            model, HF_TEXTS, [(0, 1), (1, 2)], mode=mode, batch_size=6, max_length=16
        )
        assert effect.ablated != effect.baseline
    collapse = collapse_heads(model, HF_TEXTS, max_length=16)
    full = next(r for r in collapse.all_layers if r.num_heads == model.heads_per_layer[0])
    assert full.measures.get("next_token_agreement", full.measures.get("nn_agreement")) == 1.0
    pruned = prune_by_importance(model, HF_TEXTS, fractions=(0.0, 0.5, 1.0), max_length=16)
    counts = [s.params for s in pruned.steps if s.order == "importance"]
    assert counts[0] > counts[1] > counts[2]
    embed = model.attention_layers()[0].embed_dim
    redundancy = measure_redundancy(model, HF_TEXTS, ranks=(embed, 3), max_length=16, batch_size=6)
    original = next(p for p in redundancy.curve if p.original).measures
    exact = next(p for p in redundancy.curve if p.rank == embed and not p.original).measures
    assert exact == pytest.approx(original, rel=1e-5)
    text = model_text_attention(model, HF_TEXTS[3])
    assert [v.name for v in text.views] == [
        f"{model.heads_per_layer[0]} heads",
        "1 head, same weights",
    ]
    if model.causal:
        patterns = patterns_by_length(model, HF_TEXTS, (6,), count=3)
        assert patterns[6].shape == (3, 6, 6)
        passage = " ".join(f"w{(11 * i) % 97 + 1}" for i in range(10))
        filler = " ".join(f"w{(3 * i + 1) % 89 + 1}" for i in range(20))
        repeat = f"w1 {passage} {filler} {passage}"
        budget = kv_budget(
            model,
            budgets=(0.5,),
            sinks=2,
            window=5,
            seeds=3,
            calibration_text=repeat,
            evaluation_text=repeat,
        )
        assert budget.to_dict()


def test_the_toy_logits_by_rows_equal_its_whole_logits(toy):
    from headlab.models.output_rows import next_token_scores, output_rows

    batch = toy.tokenize(TEXTS, 13)
    with torch.no_grad():
        whole = toy.run(batch)[:, :-1].double()  # (batch, pos - 1, vocab)
        top1, losses = next_token_scores(output_rows(toy, batch), batch.input_ids, rows=5)
    want = torch.nn.functional.cross_entropy(
        whole.flatten(0, 1), batch.input_ids[:, 1:].flatten(), reduction="none"
    ).view_as(losses)
    assert torch.equal(top1, whole.argmax(-1))
    torch.testing.assert_close(losses, want)
