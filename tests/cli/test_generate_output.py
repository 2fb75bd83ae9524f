"""``model generate`` prints the text a person reads: no special tokens, and a newline at the
end (new_ids in --json keep every token)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from cli_run import run
from model_files import byte_llama

END = "<|im_end|>"


@pytest.fixture(scope="module")
def chatty(tmp_path_factory):
    """A byte-level model that always predicts the special token ``END`` (id 0)."""
    return byte_llama(tmp_path_factory.mktemp("chatty"), 64, special=END)


def test_generate_prints_no_special_token_and_ends_with_a_newline(chatty, capsys):
    code, printed, err = run(
        ["model", "generate", "ab", "--model", str(chatty), "--max-new-tokens", "3"], capsys
    )
    assert code == 0, err
    assert END not in printed and printed == "\n"
    code, printed, err = run(
        ["model", "generate", "ab", "--model", str(chatty), "--max-new-tokens", "3", "--json"],
        capsys,
    )
    doc = json.loads(printed)
    assert doc["new_ids"] == [0, 0, 0] and doc["text"] == ""


def test_decode_skips_what_the_tokenizer_calls_special(chatty):
    from headlab.models import load

    reference = Tokenizer.from_file(str(chatty / "tokenizer.json"))
    model = load(chatty)
    ids = [*model.encode("hi"), 0, *model.encode(" there"), 0]
    assert model.decode(ids) == reference.decode(ids, skip_special_tokens=False)
    assert END in model.decode(ids)
    skipped = model.decode(ids, skip_special=True)
    assert skipped == reference.decode(ids, skip_special_tokens=True) == "hi there"
