"""A hostile or unusual JSONL of pairs: a line too long for any context, a lone surrogate, a
text the tokenizer writes as no token at all, each refused in one line naming the line and the
rule; lines end at ``\\n`` only, so a raw U+2028 or U+0085 inside a string (as
``json.dumps(..., ensure_ascii=False)`` writes it) is read as the text it is."""

from __future__ import annotations

import json

import pytest
from task_tokenizers import word_tokenizer

from headlab.circuits.tasks_pairs import MAX_TEXT_CHARS, encode_pairs, read_pairs

GOOD = {
    "clean": "When Mary and John went to the store , John gave a drink to",
    "corrupted": "When Alice and Bob went to the store , Tom gave a drink to",
    "answer": " Mary",
    "wrong": " John",
}


def _write(tmp_path, *lines: str):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_unicode_line_separators_inside_a_string_are_text(tmp_path, separator):
    row = {**GOOD, "clean": GOOD["clean"].replace(" store", f" store{separator}")}
    line = json.dumps(row, ensure_ascii=False)
    assert separator in line  # written raw, as json.dumps writes it
    rows = read_pairs(_write(tmp_path, json.dumps(GOOD), line))
    assert [r.line for r in rows] == [1, 2]
    assert rows[1].clean == row["clean"]


def test_a_carriage_return_before_the_newline_is_part_of_the_line_end(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes((json.dumps(GOOD) + "\r\n" + json.dumps(GOOD) + "\r\n").encode())
    assert [r.line for r in read_pairs(path)] == [1, 2]


def test_a_text_longer_than_the_rule_is_refused_before_the_tokenizer(tmp_path):
    row = {**GOOD, "corrupted": "a " * (MAX_TEXT_CHARS // 2 + 1)}
    path = _write(tmp_path, json.dumps(GOOD), json.dumps(row))
    with pytest.raises(ValueError) as error:
        read_pairs(path)
    message = str(error.value)
    rule = f"line 2: expected 'corrupted' of at most {MAX_TEXT_CHARS:,} characters"
    assert f"{path} {rule}" in message
    assert f"got {MAX_TEXT_CHARS + 2:,}" in message and "\n" not in message


@pytest.mark.parametrize("field", ["clean", "corrupted", "answer", "wrong"])
def test_a_lone_surrogate_is_refused_naming_the_line(tmp_path, field):
    line = json.dumps({**GOOD, field: GOOD[field] + "\ud800"})
    assert "\\ud800" in line  # JSON's escape: valid JSON, but no Unicode text
    with pytest.raises(ValueError) as error:
        read_pairs(_write(tmp_path, line))
    message = str(error.value)
    assert f"line 1: expected {field!r} Unicode text, got a lone surrogate" in message, message
    assert "\\ud800" in message and "\n" not in message


def test_a_number_past_pythons_digit_limit_is_refused_naming_the_line(tmp_path):
    line = json.dumps(GOOD).replace('" Mary"', "9" * 5000, 1)
    with pytest.raises(ValueError) as error:
        read_pairs(_write(tmp_path, json.dumps(GOOD), line))
    message = str(error.value)
    assert "line 2: expected a JSON object, got invalid JSON" in message, message
    assert "digits" in message and "set_int_max_str_digits" not in message


def test_a_text_of_no_tokens_is_refused_naming_the_line(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "a": 1, "b": 2}
    inner = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>")  # no BOS
    rows = read_pairs(
        _write(
            tmp_path,
            json.dumps({"clean": "a b", "corrupted": "b a", "answer": "a"}),
            json.dumps({"clean": "    ", "corrupted": "b a", "answer": "a"}),
        )
    )
    with pytest.raises(ValueError) as error:
        encode_pairs(rows, tokenizer, equal_lengths=False, where="p.jsonl")
    assert str(error.value) == (
        "p.jsonl line 2: expected 'clean' of at least one token, got none (the tokenizer "
        "writes '    ' as no token)"
    )


def test_a_prompt_past_the_positions_is_refused_naming_the_line(tmp_path):
    long = {**GOOD, "clean": GOOD["clean"] + " ," * 30, "corrupted": GOOD["corrupted"] + " ," * 30}
    rows = read_pairs(_write(tmp_path, json.dumps(GOOD), json.dumps(long)))
    tokens = len(word_tokenizer()(long["clean"])["input_ids"])
    with pytest.raises(ValueError) as error:
        encode_pairs(rows, word_tokenizer(), where="p.jsonl", positions=tokens - 1)
    assert str(error.value).startswith(
        f"p.jsonl line 2: 'clean' has {tokens} tokens, more than the model's {tokens - 1} positions"
    ), error.value
    assert encode_pairs(rows, word_tokenizer(), positions=tokens).clean.shape[1] == tokens
