"""``headlab why-attends --all-queries`` end to end on a tiny random Llama run in float64 (3
query heads on 1 K/V head) with the circuits tests' word tokenizer: the results file's matrix
equals the pair split's matrices summed over the queries (the library's reference), reads back
through ``from_dict``, the figure is headlab's, the tables fit 80 columns; every bad input is
one line and exit 2, before the model loads where the flags or the config tell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "circuits"))
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from hf_families import write_family
from task_tokenizers import tiny_llama, word_tokenizer
from test_score_split import pair_split_sum

import headlab.models
from headlab.results.output_policy import png_text_chunks
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

TEXT = "Mary went to the park . John went to the store . Mary went to the"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("all_queries") / "tiny"
    tokenizer = word_tokenizer()
    tiny_llama(tokenizer, seed=3).model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _read(path: Path) -> PairsOverQueriesResult:
    data = json.loads(path.read_text())
    assert data.pop("headlab") == "pairs-over-queries"
    return PairsOverQueriesResult.from_dict(data)


def test_the_command_equals_the_pair_split_summed(tiny_dir, tmp_path, capsys, monkeypatch):
    from headlab.cli import pairs_over_queries

    opened = pairs_over_queries.open_model

    def in_float64(*args, **kwargs):  # headlab loads in float32: the exact check needs float64
        model = opened(*args, **kwargs)
        model.model.double()
        return model

    monkeypatch.setattr(pairs_over_queries, "open_model", in_float64)
    monkeypatch.setenv("COLUMNS", "80")
    out, figure = tmp_path / "a.json", tmp_path / "a.png"
    argv = ["why-attends", "--model", str(tiny_dir), "--layer", "1", "--head", "1"]
    argv += ["--all-queries", "--text", TEXT, "--out", str(out), "--figure", str(figure)]
    capsys.readouterr()
    code, printed, err = run(argv, capsys)
    assert code == 0, err
    got = _read(out)
    tables = printed.split("\nwrote ")[0]
    assert max(len(line) for line in tables.splitlines()) <= 80
    assert "…" not in tables, [l for l in tables.splitlines() if "…" in l]
    assert "the strongest" in tables and "the marginals summed over queries" in tables
    assert png_text_chunks(figure.read_bytes())

    model = headlab.models.load(tiny_dir)
    model.model.double()
    ids = torch.tensor([model.encode(TEXT)])
    want, split = pair_split_sum(model, ids, 1, 1)
    assert want.dtype == torch.float64
    assert got.components == split.components
    assert got.keys == [p.key for p in split.pairs]
    size = float(want.abs().max())
    for side, reference in ((got.query_marginal, want.sum(1)), (got.key_marginal, want.sum(0))):
        gap = torch.tensor(side, dtype=torch.float64) - reference
        assert float(gap.abs().max()) <= 1e-10 * size
    assert abs(sum(map(sum, got.pair)) - float(want.sum())) <= 1e-10 * size


def test_a_text_file_cut_to_a_length(tiny_dir, tmp_path, capsys):
    text = tmp_path / "long.txt"
    text.write_text(" ".join([TEXT] * 30))
    out = tmp_path / "b.json"
    argv = ["why-attends", "--model", str(tiny_dir), "--layer", "0", "--head", "2"]
    code, _printed, err = run(
        [*argv, "--all-queries", "--text-file", str(text), "--length", "40", "--out", str(out)],
        capsys,
    )
    assert code == 0, err
    got = _read(out)
    assert len(got.keys) == 40 and "long.txt" in got.text


def _refused(argv: list[str], capsys, monkeypatch, model: str) -> str:
    """The one line of stderr of a run that must stop before any weight loads."""

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(headlab.models, "load", no_load)
    capsys.readouterr()  # what building the checkpoint printed
    code, _out, err = run(["why-attends", "--model", model, *argv], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--keys", "top-2"], "--keys does not go with --all-queries, which takes every query"),
        (["--query", "3"], "--query does not go with --all-queries"),
        (["--recompute"], "--recompute does not go with --all-queries"),
        (["--source-text", "s"], "--source-text does not go with --all-queries"),
        (["--attention", "cross"], "--attention does not go with --all-queries"),
        (["--text", "a b", "--text-file", "x.txt"], "give --text or --text-file, not both"),
        (["--length", "1"], "--length must be >= 2 tokens, got 1"),
        (["--layer", "-1"], "--layer must be >= 0, got -1"),
        (["--text-file", "missing.txt"], "missing.txt"),
    ],
)
def test_conflicting_or_bad_flags_before_anything(tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    base = ["--layer", "0", "--head", "0", "--all-queries"]  # a later --layer wins
    assert says in _refused([*base, *argv], capsys, monkeypatch, "no-such-model")


def test_a_length_or_text_file_needs_all_queries(tmp_path, capsys, monkeypatch):
    err = _refused(["--layer", "0", "--head", "0", "--length", "9"], capsys, monkeypatch, "x")
    assert "--text-file and --length go with --all-queries" in err


@pytest.mark.parametrize(
    ("family", "argv", "says"),
    [
        ("llama", ["--layer", "2", "--head", "0"], "--layer must lie in 0..1"),
        ("llama", ["--layer", "1", "--head", "6"], "--head must lie in 0..5"),
        ("llama", ["--layer", "0", "--head", "0", "--length", "65"], "--length must be at most 64"),
        ("qwen3", ["--layer", "0", "--head", "0"], "QK-norm (family qwen3)"),
        ("gemma2", ["--layer", "0", "--head", "0"], "a soft-cap of the scores"),
        ("mistral", ["--layer", "0", "--head", "0"], "sliding-window layers"),
        ("gpt_oss", ["--layer", "0", "--head", "0"], "sliding-window layers"),
        ("bert", ["--layer", "0", "--head", "0"], "is not causal"),
    ],
)
def test_the_config_refuses_before_the_load(
    tmp_path_factory, capsys, monkeypatch, family, argv, says
):
    folder = write_family(family, tmp_path_factory.mktemp(family) / family)
    out = tmp_path_factory.mktemp("out") / "a.json"
    err = _refused([*argv, "--all-queries", "--out", str(out)], capsys, monkeypatch, str(folder))
    assert says in err
    assert not out.exists()
