"""A KV plan runs the model exactly as planned: against the same keys hidden by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import headlab.models.output_rows as output_rows_module
from headlab.attention.interventions import intervene
from headlab.heads.kv_budget import (
    KVPlan,
    check_budgets,
    default_texts,
    evaluate,
    groups_for_saving,
    kv_budget,
    planned,
)
from headlab.heads.repeats import copy_sources, copy_task
from headlab.models.corpus import long_document
from headlab.results.kv_budget_result import KVBudgetResult

TEXT = " ".join(f"t{(13 * i) % 97}" for i in range(25))


def test_a_plan_equals_hiding_the_keys_by_hand(tiny_llama):
    batch = tiny_llama.tokenize([TEXT])
    n = batch.input_ids.shape[1]
    plan = KVPlan(((0, 1), (2, 0)), sinks=2, window=5)
    with torch.no_grad(), planned(tiny_llama, plan):
        got = tiny_llama.run(batch)
    assert all(layer.sites.budget is None for layer in tiny_llama.attention_layers())
    positions = torch.arange(n)
    offset = positions[:, None] - positions[None, :]
    outside = (offset >= 5) & (positions[None, :] >= 2)  # (q, k): beyond sinks and window

    def hide(heads):
        def edit(scores):  # (batch, head, q, k): the planned heads lose the far keys
            scores = scores.clone()
            scores[:, heads] = scores[:, heads].masked_fill(outside, float("-inf"))
            return scores

        return edit

    layers = tiny_llama.attention_layers()
    first, third = hide([3, 4, 5]), hide([0, 1, 2])
    with (
        torch.no_grad(),
        intervene(layers[0], "scores", first),
        intervene(layers[2], "scores", third),
    ):
        want = tiny_llama.run(batch)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        plain = tiny_llama.run(batch)
    assert (plain - got).abs().max() > 1e-4  # the plan changed something


def test_kv_saved_and_refusals(tiny_llama):
    plan = KVPlan(((0, 0), (1, 1), (2, 0)), sinks=4, window=6)
    # 6 groups x 100 tokens in full; 3 of them keep 10
    assert plan.kv_saved([2, 2, 2], 100) == pytest.approx(600 / (600 - 3 * 90))
    assert KVPlan((), 4, 6).kv_saved([2, 2, 2], 100) == 1.0
    with (
        pytest.raises(ValueError, match=r"plan: K/V group 1\.2 is not in the model"),
        planned(tiny_llama, KVPlan(((1, 2),))),
    ):
        pass
    for bad in ((), (0.0,), (1.5,), (True,)):
        with pytest.raises(ValueError, match="budgets"):
            check_budgets(bad)


@pytest.mark.parametrize("rows", [3, 512])  # blocks of 3 rows, and the whole text at once
def test_evaluate_by_hand(tiny_llama, rows, monkeypatch):
    monkeypatch.setattr(output_rows_module, "LOGIT_ROWS", rows)
    passage = " ".join(f"t{i}" for i in range(40, 52))
    text = f"t1 {passage} t2 t3 t4 {passage}"
    batch = tiny_llama.tokenize([text])
    sources = copy_sources(batch.input_ids[0])
    result = evaluate(tiny_llama, batch, sources)
    with torch.no_grad():
        logits = tiny_llama.run(batch)[0, :-1]
    targets = batch.input_ids[0, 1:]
    copies = sources[:-1] >= 0
    losses = torch.nn.functional.cross_entropy(logits.double(), targets, reduction="none")
    assert result.perplexity == pytest.approx(float(losses[~copies].mean().exp()))
    hits = (logits[copies].argmax(-1) == targets[copies]).double().mean()
    assert result.copy_accuracy == pytest.approx(float(hits))
    assert int(copies.sum()) == 12 - 6


def test_a_memory_saving_becomes_the_fewest_groups_that_reach_it():
    # SmolLM2: 30 layers x 3 K/V groups, 4 sinks + 256 window at 8192 tokens
    assert groups_for_saving(1.67, 90, 8192, 260) == 38  # 90 * (1 - 1/1.67) / (1 - 260/8192)
    assert KVPlan(((0, 0),) * 38, 4, 256).kv_saved([3] * 30, 8192) >= 1.67
    assert KVPlan(((0, 0),) * 37, 4, 256).kv_saved([3] * 30, 8192) < 1.67
    with pytest.raises(ValueError, match=r"kv_saved=40 is out of reach: .* saves 31\.51x at most"):
        groups_for_saving(40, 90, 8192, 260)
    for bad in ((1.0,), (0.5,), (float("inf"),), (True,)):
        with pytest.raises(ValueError, match="kv_saved must be numbers > 1"):
            check_budgets((), bad)


@given(st.integers(1, 40), st.integers(2, 500), st.integers(1, 60), st.floats(1.001, 30))
def test_the_planned_saving_reaches_the_target_with_no_group_to_spare(groups, n, kept, target):
    kept = min(kept, n - 1)
    if target > n / kept:
        with pytest.raises(ValueError, match="out of reach"):
            groups_for_saving(target, groups, n, kept)
        return
    count = groups_for_saving(target, groups, n, kept)
    per_layer = [1] * groups  # one group per layer: the plan's own arithmetic as the reference
    window = KVPlan((), 0, kept)

    def saved(c):
        return KVPlan(tuple((i, 0) for i in range(c)), window.sinks, kept).kv_saved(per_layer, n)

    assert saved(count) >= target * (1 - 1e-12)
    assert count == 1 or saved(count - 1) < target


WORDS = SimpleNamespace(
    name="words", max_positions=10_000, count_tokens=lambda text: len(text.split())
)


def test_the_default_texts_share_no_filler():
    """Calibration and held-out copy tasks at 8192 tokens (here one token a word): their filler
    words come from disjoint halves of the document, and the texts share almost no 8-word
    sequence (the document's own repeated sentences only; rotations of one text shared ~80%)."""
    document = long_document().split()
    calibration, held_out = (copy_task(WORDS, 8192, seed=7, part=p, parts=2) for p in (0, 1))
    first, second = calibration.filler_positions(), held_out.filler_positions()
    assert len(first) == calibration.filler_words > 5000 and len(second) > 5000
    assert max(first) < len(document) // 2 <= min(second)
    for task, positions in ((calibration, first), (held_out, second)):
        words = task.text.split()
        passage = words[task.offset_words : task.offset_words + task.passage_words]
        filler = words[: task.offset_words] + words[task.offset_words + task.passage_words :]
        filler = filler[: -task.passage_words]
        start, size = task.filler_start, task.slice_stop - task.slice_start
        order = [
            task.slice_start + (start - task.slice_start + i) % size
            for i in range(task.filler_words)
        ]
        assert filler == [document[i] for i in order] and set(order) == positions
        assert words[-task.passage_words :] == passage

    def grams(text):
        w = text.split()
        return {tuple(w[i : i + 8]) for i in range(len(w) - 7)}

    a, b = grams(calibration.text), grams(held_out.text)
    assert len(a & b) < 0.01 * len(b)
    old = [copy_task(WORDS, 8192, seed=s).text for s in (0, 1)]  # the former default
    assert len(grams(old[0]) & grams(old[1])) > 0.5 * len(grams(old[1]))
    assert default_texts(WORDS, 8192, 7, True) == (calibration.text, held_out.text)
    assert default_texts(WORDS, 8192, 8, True)[1] != held_out.text  # the seed moves them


def test_a_short_context_names_the_model_not_a_flag(tiny_llama):
    short = SimpleNamespace(name="short", max_positions=20, count_tokens=WORDS.count_tokens)
    # one token a word: the shortest passage (8 words) twice and a filler word take 17 > 20 / 2
    with pytest.raises(ValueError, match="short's context of 20 tokens cannot hold the built-in"):
        default_texts(short, 20, 0, False)
    with pytest.raises(ValueError, match="context of 64 tokens is not longer than sinks 4"):
        kv_budget(tiny_llama)
    with pytest.raises(
        ValueError,
        match="n_tokens=30 cannot hold the built-in copy task: its "
        "shortest passage \\(8 words\\) twice takes 17 tokens, more than half",
    ):
        kv_budget(tiny_llama, n_tokens=30, window=8)
    with pytest.raises(ValueError, match="seeds must be between 3"):
        kv_budget(tiny_llama, seeds=2)
    # the cap the CLI had alone (issue 29): the library's, so both refuse the same
    with pytest.raises(ValueError, match="seeds must be between 3 and 100, got 101"):
        kv_budget(tiny_llama, seeds=101)


PASSAGE = " ".join(f"t{(11 * i) % 97}" for i in range(12))


def _text(seed: int) -> str:
    filler = " ".join(f"t{(7 * i + seed) % 89}" for i in range(30))
    return f"t1 {PASSAGE} {filler} {PASSAGE}"


@pytest.mark.parametrize("k", [None, 4])
def test_the_retrieval_check_draws_random_heads_from_the_others(tiny_llama, k):
    result = kv_budget(
        tiny_llama,
        budgets=(0.5,),
        kv_saved=(1.2,),
        sinks=2,
        window=8,
        calibration_text=_text(5),
        evaluation_text=_text(3),
        retrieval_k=k,
    )
    check = result.retrieval
    scores = sorted((v for row in _roles(tiny_llama).retrieval for v in row), reverse=True)
    if k is None:
        k = sum(v >= 0.1 for v in scores) or 1
        assert ("no head scores >= 0.1" in check.note) == (scores[0] < 0.1)
    assert check.k == k and len(check.heads) == k and len(check.random_heads) == 3
    for drawn in check.random_heads:
        assert len(drawn) == k and not {tuple(h) for h in drawn} & {tuple(h) for h in check.heads}
    # 1.2x at 55 tokens with 10 kept: ceil(6 * (1 - 1/1.2) / (1 - 10/55)) = 2 groups; 0.5: 3
    chosen = [r for r in result.runs if r.kind == "chosen"]
    assert [(len(r.groups), r.target_kv_saved) for r in chosen] == [(2, 1.2), (3, None)]
    assert chosen[0].kv_saved >= 1.2 and chosen[0].budget == pytest.approx(2 / 6)
    assert KVBudgetResult.from_dict(result.to_dict()) == result


def _roles(model):
    from headlab.heads.long_context import long_text_statistics

    return long_text_statistics(model, _text(5), window=(2, 8), strict_window=True).roles
