"""``headlab circuits`` against the model's positions: a task longer than the model's positions
(a built-in task's --length, a line of --pairs) is one line and exit 2 before the weights load
(read from the config and the tokenizer), on a learned-position GPT-2 and on a rotary Llama
alike; the same check refuses the built pairs after the load, to the token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run

POSITIONS = 32


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    """A random GPT-2 of 32 positions with a word tokenizer t0..t96 (no BOS)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("gpt2-32")
    config = transformers.GPT2Config(
        vocab_size=97,
        n_embd=24,
        n_layer=2,
        n_head=3,
        n_positions=POSITIONS,
        bos_token_id=None,
        eos_token_id=None,
    )
    torch.manual_seed(5)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder, safe_serialization=True)
    tokenizer = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(97)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def _no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)


def _pairs(tmp_path, tokens: int) -> Path:
    words = " ".join(f"t{1 + i % 90}" for i in range(tokens))
    path = tmp_path / "pairs.jsonl"
    short = {"clean": "t1 t2 t3", "corrupted": "t4 t5 t6", "answer": "t7"}
    path.write_text(
        json.dumps(short)
        + "\n"
        + json.dumps({"clean": words, "corrupted": words.replace("t1 ", "t2 ", 1), "answer": "t7"})
        + "\n"
    )
    return path


def _one_line(argv, capsys) -> str:
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("headlab: error:") and "Traceback" not in err
    return err


def test_an_induction_task_past_the_positions_before_the_load(
    gpt2_dir, tmp_path, capsys, monkeypatch
):
    _no_loading(monkeypatch)
    err = _one_line(
        ["circuits", "--model", str(gpt2_dir), "--length", "40", "--out", str(tmp_path / "c.json")],
        capsys,
    )
    assert (
        "the induction task of --length 40 (at most 16 fits) has 80 tokens, more than "
        f"the model's {POSITIONS} positions" in err
    ), err


@pytest.mark.parametrize("tokens", [POSITIONS + 1, 201])
def test_a_pairs_line_past_the_positions_before_the_load(
    gpt2_dir, tmp_path, capsys, monkeypatch, tokens
):
    _no_loading(monkeypatch)
    pairs = _pairs(tmp_path, tokens)
    err = _one_line(
        [
            "circuits",
            "--model",
            str(gpt2_dir),
            "--pairs",
            str(pairs),
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
    )
    assert (
        f"{pairs} line 2: 'clean' has {tokens} tokens, more than the model's {POSITIONS} "
        "positions" in err
    ), err


def test_a_rotary_model_past_its_maximum_before_the_load(
    tiny_llama_dir, tmp_path, capsys, monkeypatch
):
    # the conftest's Llama: 64 positions; before, a 301-token prompt ran with exit 0
    _no_loading(monkeypatch)
    pairs = _pairs(tmp_path, 301)
    err = _one_line(
        [
            "circuits",
            "--model",
            str(tiny_llama_dir),
            "--pairs",
            str(pairs),
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
    )
    assert "line 2: 'clean' has 301 tokens, more than the model's 64 positions" in err, err
    err = _one_line(
        [
            "circuits",
            "--model",
            str(tiny_llama_dir),
            "--length",
            "33",
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
    )
    assert "has 66 tokens, more than the model's 64 positions" in err, err


def test_the_same_check_after_the_load_to_the_token(gpt2_dir):
    """Exactly the model's positions run; one more is refused by the built pairs' check."""
    from headlab.circuits.tasks import TaskRequest, build_pairs
    from headlab.models import load

    model = load(gpt2_dir)
    assert model.max_positions == POSITIONS
    pairs = build_pairs(TaskRequest("induction", n_pairs=2, length=POSITIONS // 2), model)
    assert pairs.clean.shape == (2, POSITIONS)
    with pytest.raises(ValueError, match=f"has {POSITIONS + 2} tokens, more than the model's"):
        build_pairs(TaskRequest("induction", n_pairs=2, length=POSITIONS // 2 + 1), model)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"clean": "    ", "corrupted": "t1 t2", "answer": "t3"},
            "line 2: expected 'clean' of at least one token, got none",
        ),
        (
            {"clean": "t1 \ud800", "corrupted": "t1 t2", "answer": "t3"},
            "line 2: expected 'clean' Unicode text, got a lone surrogate",
        ),
    ],
)
def test_a_pairs_line_the_tokenizer_cannot_take_before_the_load(
    gpt2_dir, tmp_path, capsys, monkeypatch, row, message
):
    _no_loading(monkeypatch)
    pairs = tmp_path / "pairs.jsonl"
    good = {"clean": "t1 t2", "corrupted": "t3 t4", "answer": "t5"}
    pairs.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    err = _one_line(
        [
            "circuits",
            "--model",
            str(gpt2_dir),
            "--pairs",
            str(pairs),
            "--method",
            "composition",
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
    )
    assert message in err, err
