"""The built-in tasks' pairs, in a tiny word-level tokenizer's tokens (task_tokenizers.py): clean
and corrupted of equal length, differing only where the task corrupts, answers single tokens
read back from the tokenizer itself; the request's errors name the option."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from task_tokenizers import NAMES, tiny_llama, word_tokenizer

from headlab.circuits import tasks_builtin
from headlab.circuits.tasks import TaskRequest, build_pairs


@pytest.fixture(scope="module")
def model():
    return tiny_llama(word_tokenizer())


def _decoded(tokenizer, ids) -> list[str]:
    return tokenizer.convert_ids_to_tokens([int(i) for i in ids])


@given(length=st.integers(2, 31), n=st.integers(1, 5), seed=st.integers(0, 2**32))
@settings(max_examples=15)
def test_induction_repeats_r_and_corrupts_only_the_first_half(length, n, seed):
    tokenizer = word_tokenizer()
    pairs = tasks_builtin.induction(tokenizer, n, length, seed)
    bos = tokenizer.bos_token_id
    assert pairs.clean.shape == pairs.corrupted.shape == (n, 1 + 2 * length)
    assert bool((pairs.clean[:, 0] == bos).all()) and bool((pairs.corrupted[:, 0] == bos).all())
    first, second = pairs.clean[:, 1 : 1 + length], pairs.clean[:, 1 + length :]
    assert torch.equal(first, second)
    assert torch.equal(pairs.corrupted[:, 1 + length :], second)
    differs = pairs.differing_positions()
    assert not bool(differs[:, 0].any()) and not bool(differs[:, 1 + length :].any())
    special = set(tokenizer.all_special_ids)
    for row in torch.cat([pairs.clean, pairs.corrupted])[:, 1:]:
        assert len(set(row[:length].tolist())) == length  # no token repeats within r or r'
        assert not special & set(row.tolist())
    # the metric reads the second half's next tokens: positions 1 + length .. 2 length - 1
    rows, positions = pairs.mask.nonzero(as_tuple=True)
    assert set(positions.tolist()) == set(range(1 + length, 2 * length))
    assert torch.equal(pairs.answers[rows, positions], pairs.clean[rows, positions + 1])


def test_induction_is_seeded_and_refuses_a_length_beyond_the_vocabulary():
    tokenizer = word_tokenizer()
    assert torch.equal(
        tasks_builtin.induction(tokenizer, 2, 7, 3).clean,
        tasks_builtin.induction(tokenizer, 2, 7, 3).clean,
    )
    assert not torch.equal(
        tasks_builtin.induction(tokenizer, 2, 7, 3).clean,
        tasks_builtin.induction(tokenizer, 2, 7, 4).clean,
    )
    ordinary = len(tokenizer) - len(tokenizer.all_special_ids)
    with pytest.raises(ValueError, match=f"length must be at most {ordinary}"):
        tasks_builtin.induction(tokenizer, 1, ordinary + 1, 0)


def test_ioi_names_are_the_tokenizers_single_tokens_and_only_names_change(model):
    tokenizer = model.tokenizer
    in_vocabulary = {name for name in tasks_builtin.NAMES if name in tokenizer.get_vocab()}
    assert set(NAMES) <= in_vocabulary  # the fixture's names and those of the filler ("Mark")
    assert sorted(tasks_builtin.single_token_names(tokenizer)) == sorted(in_vocabulary)
    pairs = build_pairs(TaskRequest(task="ioi", n_pairs=12, seed=5), model)
    assert pairs.metric == "logit_diff" and pairs.clean.shape == pairs.corrupted.shape
    name_ids = {tokenizer.convert_tokens_to_ids(name) for name in in_vocabulary}
    for clean, corrupted, mask, answers, wrong in zip(
        pairs.clean, pairs.corrupted, pairs.mask, pairs.answers, pairs.wrong, strict=True
    ):
        real = clean != tokenizer.pad_token_id
        last = int(real.nonzero().max())
        assert mask.nonzero().flatten().tolist() == [last]
        io, s = int(answers[last]), int(wrong[last])
        assert io in name_ids and s in name_ids and io != s
        text = clean[real].tolist()
        assert text.count(io) == 1 and text.count(s) == 2  # IO once, S twice
        assert _decoded(tokenizer, clean[last : last + 1]) == ["to"]
        changed = (clean != corrupted).nonzero().flatten().tolist()
        assert changed and all(int(clean[p]) in name_ids for p in changed)
        assert all(int(corrupted[p]) in name_ids for p in changed)
        abc = {int(corrupted[p]) for p in changed}
        assert len(abc) == 3 and not abc & {io, s}  # three other names (Wang et al.'s ABC)


def test_ioi_refuses_a_tokenizer_with_too_few_single_token_names():
    tokenizer = word_tokenizer(("Mary", "John"), filler=False)
    with pytest.raises(ValueError, match=r"ioi needs at least 3 names .* it has 2 of the"):
        tasks_builtin.ioi(tokenizer, 2, 0)


def test_greater_than_changes_only_the_year_and_signs_the_later_years(model):
    tokenizer = model.tokenizer
    pairs = build_pairs(TaskRequest(task="greater-than", n_pairs=9, seed=1), model)
    years = tasks_builtin.year_tokens(tokenizer)
    assert _decoded(tokenizer, years) == [f"{yy:02d}" for yy in range(100)]
    for row in range(pairs.batch):
        changed = (pairs.clean[row] != pairs.corrupted[row]).nonzero().flatten()
        assert len(changed) == 1
        p = int(changed[0])
        yy = int(_decoded(tokenizer, pairs.clean[row, p : p + 1])[0])
        assert 2 <= yy <= 98
        assert _decoded(tokenizer, pairs.corrupted[row, p - 1 : p + 1]) == ["17", "01"]
        assert _decoded(tokenizer, pairs.clean[row, -1:]) == ["17"]
        assert pairs.candidates[row].tolist() == years
        assert pairs.signs[row].tolist() == [1.0 if y > yy else -1.0 for y in range(100)]


def test_greater_than_refuses_a_tokenizer_without_two_digit_years(model):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "17": 1, "1732": 2}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>")
    with pytest.raises(ValueError, match="greater-than needs years written as ' 17' \\+ one"):
        tasks_builtin.year_tokens(tokenizer)


def test_copy_task_reuses_heads_copy_task_and_corrupts_the_first_passage(model):
    from headlab.heads.repeats import copy_sources, copy_task

    pairs = build_pairs(TaskRequest(task="copy", n_pairs=3, length=300, seed=4), model)
    assert pairs.clean.shape == pairs.corrupted.shape and pairs.clean.shape[1] <= 300
    for row in range(3):
        words = copy_task(model, 300, seed=4 + row).text.split()
        clean = pairs.clean[row]
        changed = (clean != pairs.corrupted[row]).nonzero().flatten()
        copied = pairs.mask[row].nonzero().flatten()
        assert len(copied) >= 40  # most of the 48-word passage is copied
        # every corrupted position lies before the repeated passage the metric reads
        assert int(changed.max()) < int(copied.min())
        # and the copies are gone from the corrupted text
        assert not bool((copy_sources(pairs.corrupted[row])[copied] >= 0).any())
        assert torch.equal(pairs.answers[row, copied], clean[copied + 1])
        tail = model.tokenizer(" ".join(words[-5:]), add_special_tokens=False)["input_ids"]
        assert clean[-len(tail) :].tolist() == tail  # the text of heads.repeats.copy_task


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"task": "parity"}, "task must be one of induction, copy, ioi, greater-than, pairs"),
        ({"n_pairs": 0}, "n_pairs must be between 1 and 4096, got 0"),
        ({"seed": -1}, "seed must be between 0"),
        ({"length": 1}, "length must be between 2"),
        ({"task": "ioi", "length": 9}, "length applies to induction and copy only, not ioi"),
        ({"task": "pairs"}, "pairs_file must be given with task 'pairs'"),
        ({"pairs_file": "x.jsonl"}, "pairs_file must be given with task 'pairs' .* 'induction'"),
        ({"task": "pairs", "pairs_file": "/nonexistent.jsonl"}, "pairs_file must be a file"),
    ],
)
def test_the_request_names_the_option_it_refuses(changes, message):
    with pytest.raises(ValueError, match=message):
        TaskRequest(**changes)
