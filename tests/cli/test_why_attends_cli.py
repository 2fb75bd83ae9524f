"""``headlab why-attends`` end to end on a tiny random Llama (3 query heads on 1 K/V head) with the
circuits tests' word tokenizer: the results file equals the library's split of the same text,
reads back through ``from_dict``, the figure is headlab's, the tables fit 80 columns, and every
bad input is one line and exit 2, before the model loads where it can be known then."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "circuits"))
from task_tokenizers import tiny_llama, word_tokenizer

from headlab.results.output_policy import png_text_chunks
from headlab.results.score_split_result import ScoreSplitResult

TEXT = "Mary went to the park . John went to the store . Mary went to the"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("why_attends") / "tiny"
    tokenizer = word_tokenizer()
    tiny_llama(tokenizer).model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def test_end_to_end_equals_the_library(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out, figure = tmp_path / "w.json", tmp_path / "w.png"
    argv = [
        "why-attends",
        "--model",
        str(tiny_dir),
        "--layer",
        "1",
        "--head",
        "2",
        "--text",
        TEXT,
        "--query",
        "-1,-2",
        "--keys",
        "top-2",
        "--out",
        str(out),
        "--figure",
        str(figure),
    ]
    code, printed, err = run(argv, capsys)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data.pop("headlab") == "score-split"
    got = ScoreSplitResult.from_dict(data)
    assert [(p.query, p.key) for p in got.pairs][:2] and len(got.pairs) == 4
    assert max(len(line) for line in printed.splitlines()) <= 80
    assert "…" not in printed
    assert png_text_chunks(figure.read_bytes())

    from headlab.circuits.score_keys import KeySpec
    from headlab.circuits.score_sides import Sides
    from headlab.circuits.score_split import split_scores
    from headlab.models import load

    model = load(tiny_dir)
    ids = model.encode(TEXT)
    with torch.no_grad():
        want = split_scores(
            Sides(model, torch.tensor([ids])),
            1,
            2,
            [len(ids) - 1, len(ids) - 2],
            KeySpec.parse("top-2"),
        )
    for a, b in zip(got.pairs, want.pairs, strict=True):
        assert (a.query, a.key) == (b.query, b.key)
        assert a.key_marginal == pytest.approx(b.key_marginal, abs=1e-6)
        assert abs(sum(a.key_marginal) - a.score) <= 1e-4


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--keys", "top-0"], "--keys top-K needs K >= 1"),
        (["--keys", "sideways"], "--keys must be one of"),
        (["--layer", "-1"], "--layer must be >= 0"),
        (["--head", "-2"], "--head must be >= 0"),
        (["--query", "x"], "--query takes comma-separated integers"),
    ],
)
def test_bad_input_before_the_model_loads(tmp_path, capsys, argv, says):
    base = {"--layer": "0", "--head": "0"}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    flat = [x for pair in base.items() for x in pair]
    missing = tmp_path / "no-such-model"  # never read: the input fails first
    code, _out, err = run(
        ["why-attends", "--model", str(missing), *flat, "--out", str(tmp_path / "w.json")], capsys
    )
    assert code == 2
    assert says in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--layer", "2", "--head", "0"], "--layer must lie in 0..1"),
        (["--layer", "1", "--head", "3"], "--head must lie in 0..2"),
        (["--layer", "0", "--head", "0", "--keys", "induction", "--query", "1"], "names no key"),
        (["--layer", "0", "--head", "0", "--query", "99"], "--query must lie in"),
        (["--layer", "0", "--head", "0", "--query", "3", "--keys", "5"], "key 5 comes after"),
    ],
)
def test_bad_input_against_the_model(tiny_dir, tmp_path, capsys, argv, says):
    code, _out, err = run(
        [
            "why-attends",
            "--model",
            str(tiny_dir),
            "--text",
            TEXT,
            *argv,
            "--out",
            str(tmp_path / "w.json"),
        ],
        capsys,
    )
    assert code == 2
    assert says in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.json").exists()


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A random BERT (post-norm encoder, MiniLM's tokenizer): E=15 with 3 heads, 2 layers."""
    from transformers import BertConfig

    from headlab.models import default_model_dir, write_random_bert

    config = BertConfig(
        hidden_size=15,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=23,
        max_position_embeddings=37,
    )
    tokenizer = default_model_dir() / "tokenizer.json"
    folder = tmp_path_factory.mktemp("why_attends_bert")
    return write_random_bert(folder, config, tokenizer, seed=3)


def test_an_encoder_key_after_the_query(bert_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out, figure = tmp_path / "e.json", tmp_path / "e.png"
    argv = ["why-attends", "--model", str(bert_dir), "--layer", "1", "--head", "2"]
    argv += ["--text", "the cat sat on the mat", "--query", "2", "--keys", "5"]
    code, printed, err = run([*argv, "--out", str(out), "--figure", str(figure)], capsys)
    assert code == 0, err
    data = json.loads(out.read_text())
    data.pop("headlab")
    (pair,) = ScoreSplitResult.from_dict(data).pairs
    assert (pair.query, pair.key) == (2, 5)
    assert abs(sum(pair.key_marginal) - pair.score) <= 1e-4
    assert pair.sources  # split by source through the post-norm blocks
    assert max(len(line) for line in printed.splitlines()) <= 80
    assert png_text_chunks(figure.read_bytes())


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    """A random T5 encoder-decoder with a character tokenizer."""
    import transformers

    sys.path.insert(0, str(Path(__file__).parents[1] / "kinds"))
    from tiny_kinds import char_tokenizer

    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=40,
        d_model=24,
        d_kv=6,
        d_ff=40,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=4,
        relative_attention_num_buckets=8,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    folder = tmp_path_factory.mktemp("why_attends_t5")
    transformers.T5ForConditionalGeneration(config).save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


def test_an_encoder_decoders_decoder_head(t5_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "t.json"
    argv = ["why-attends", "--model", str(t5_dir), "--source-text", "the cat sat"]
    argv += ["--text", "die katze", "--layer", "2", "--head", "1", "--keys", "all"]
    code, printed, err = run([*argv, "--query", "4", "--out", str(out)], capsys)
    assert code == 0, err
    data = json.loads(out.read_text())
    data.pop("headlab")
    result = ScoreSplitResult.from_dict(data)
    assert [p.key for p in result.pairs] == list(range(5))  # causal: keys up to the query
    assert "1.x3" in result.components  # the cross-attention heads write the decoder stream
    for pair in result.pairs:
        assert abs(pair.raw + pair.bias_term - pair.score) <= 1e-5
    assert max(abs(p.bias_term) for p in result.pairs) > 1e-3  # T5's relative bias
    assert max(len(line) for line in printed.splitlines()) <= 80


def test_source_text_needs_an_encoder_decoder_before_the_load(tiny_dir, tmp_path, capsys):
    argv = ["why-attends", "--model", str(tiny_dir), "--layer", "0", "--head", "0"]
    code, _out, err = run([*argv, "--source-text", "x", "--out", str(tmp_path / "w.json")], capsys)
    assert code == 2
    assert "--source-text needs an encoder-decoder" in err
    assert len(err.strip().splitlines()) == 1
