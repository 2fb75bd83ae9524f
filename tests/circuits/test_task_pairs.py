"""The user's JSONL of pairs: each malformed line refused in one line naming the file and the
line; answers checked against the tokenizer (inside the vocabulary, one token, not the unknown
token); lengths compared where the method needs them equal; a good file read back token by
token."""

from __future__ import annotations

import json

import pytest
import torch
from task_tokenizers import word_tokenizer

from headlab.circuits.tasks_pairs import MAX_BYTES, encode_pairs, read_pairs


def _write(tmp_path, *lines: str):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = {
    "clean": "When Mary and John went to the store , John gave a drink to",
    "corrupted": "When Alice and Bob went to the store , Tom gave a drink to",
    "answer": " Mary",
    "wrong": " John",
}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"line 2: expected a JSON object, got invalid JSON \(.* at column 2\)"),
        ("[1, 2]", "line 2: expected a JSON object, got list"),
        (
            json.dumps({**GOOD, "clean": ""}),
            "line 2: expected 'clean' a non-empty string, got \"\"",
        ),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "corrupted"}),
            "line 2: expected 'corrupted' a non-empty string, got nothing",
        ),
        (json.dumps({**GOOD, "answer": -3}), "line 2: expected 'answer' a token .* got -3"),
        (json.dumps({**GOOD, "answer": True}), "line 2: expected 'answer' a token .* got true"),
        (json.dumps({**GOOD, "extra": 1}), "line 2: expected only the fields .* got 'extra'"),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "wrong"}),
            "line 2: 'wrong' must be given on every line or on none \\(line 1 has\\)",
        ),
    ],
)
def test_a_malformed_line_is_refused_in_one_line_naming_it(tmp_path, line, message):
    path = _write(tmp_path, json.dumps(GOOD), line)
    with pytest.raises(ValueError, match=message) as error:
        read_pairs(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_empty_files_and_files_too_large_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"expected at least one pair .* got none"):
        read_pairs(_write(tmp_path, "", "  "))
    big = tmp_path / "big.jsonl"
    with big.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    with pytest.raises(ValueError, match=f"expected at most {MAX_BYTES} bytes"):
        read_pairs(big)
    with pytest.raises(ValueError, match="pairs file must be a file"):
        read_pairs(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"answer": 100000},
            "line 1: answer token id must lie in the vocabulary 0..2858, got 100000",
        ),
        ({"wrong": " Mary Ann"}, "line 1: wrong ' Mary Ann' must be one token, got 2"),
        ({"answer": " Zyzzyva"}, "line 1: answer ' Zyzzyva' is not in the vocabulary"),
        (
            {"corrupted": "When Alice and Bob went to the store , Tom gave a drink to Mary"},
            "line 1: clean and corrupted must have the same number of tokens for this method, got "
            "15 and 16",
        ),
    ],
)
def test_answers_and_lengths_are_checked_against_the_tokenizer(tmp_path, changes, message):
    tokenizer = word_tokenizer()
    assert len(tokenizer) == 2859  # the vocabulary size the first message names
    rows = read_pairs(_write(tmp_path, json.dumps({**GOOD, **changes})))
    with pytest.raises(ValueError, match=message):
        encode_pairs(rows, tokenizer, where="pairs.jsonl")


def test_unequal_lengths_pass_where_the_method_allows_them(tmp_path):
    longer = {**GOOD, "corrupted": GOOD["corrupted"] + " Mary"}
    rows = read_pairs(_write(tmp_path, json.dumps(longer)))
    pairs = encode_pairs(rows, word_tokenizer(), equal_lengths=False)
    assert pairs.clean.shape == pairs.corrupted.shape == (1, 16)


def test_a_good_file_reads_back_token_by_token(tmp_path):
    tokenizer = word_tokenizer()
    second = {
        "clean": "The war lasted from the year 1732 to the year 17",
        "corrupted": "The war lasted from the year 1701 to the year 17",
        "answer": "99",
        "wrong": tokenizer.convert_tokens_to_ids("32"),
    }
    rows = read_pairs(_write(tmp_path, json.dumps(GOOD), "", json.dumps(second)))
    assert [row.line for row in rows] == [1, 3]
    pairs = encode_pairs(rows, tokenizer)
    assert pairs.metric == "logit_diff" and pairs.clean.shape == (2, 15)
    for i, row in enumerate((GOOD, second)):
        ids = tokenizer(row["clean"])["input_ids"]
        assert pairs.clean[i, : len(ids)].tolist() == ids
        assert bool((pairs.clean[i, len(ids) :] == tokenizer.pad_token_id).all())
        assert pairs.mask[i].nonzero().flatten().tolist() == [len(ids) - 1]
    vocab = tokenizer.get_vocab()
    assert pairs.answers[pairs.mask].tolist() == [vocab["Mary"], vocab["99"]]
    assert pairs.wrong[pairs.mask].tolist() == [vocab["John"], vocab["32"]]
    assert torch.equal(
        pairs.clean[0] != pairs.corrupted[0],
        torch.tensor(
            [
                c != k
                for c, k in zip(pairs.clean[0].tolist(), pairs.corrupted[0].tolist(), strict=True)
            ]
        ),
    )


def test_without_wrong_tokens_the_metric_is_the_answers_log_probability(tmp_path):
    row = {k: v for k, v in GOOD.items() if k != "wrong"}
    pairs = encode_pairs(read_pairs(_write(tmp_path, json.dumps(row))), word_tokenizer())
    assert pairs.metric == "logprob" and pairs.wrong is None


def test_a_fifo_or_a_deep_line_is_one_line(tmp_path):
    """issue 31: a FIFO is named, never opened (it would block); a line nested past the parser's
    recursion is a ValueError naming the line, not a RecursionError."""
    import os

    fifo = tmp_path / "pairs.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"pairs\.jsonl is a FIFO, expected a regular file"):
        read_pairs(fifo)
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"clean": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ValueError, match=r"deep\.jsonl line 1: expected JSON nested at most 64"):
        read_pairs(deep)
