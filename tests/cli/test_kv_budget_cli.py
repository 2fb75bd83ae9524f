"""``model kv-budget``, and the head roles of ``model heads --text-file``, on a tiny decoder."""

from __future__ import annotations

import json

import pytest

from cli_run import run
from headlab.results.kv_budget_result import KVBudgetResult

PASSAGE = " ".join(f"t{(11 * i) % 97}" for i in range(12))


def _text(seed: int) -> str:
    filler = " ".join(f"t{(7 * i + seed) % 89}" for i in range(30))
    return f"t1 {PASSAGE} {filler} {PASSAGE}"


@pytest.fixture
def llama_dir(tiny_llama, tmp_path_factory):
    return next(
        p for p in tmp_path_factory.getbasetemp().glob("tiny-llama*/") if p.name == tiny_llama.name
    )


@pytest.fixture
def texts(tmp_path):
    held_out, calibration = tmp_path / "eval.txt", tmp_path / "calibration.txt"
    held_out.write_text(_text(3), encoding="utf-8")
    calibration.write_text(_text(5), encoding="utf-8")
    return ["--text-file", str(held_out), "--calibration-file", str(calibration)]


def test_kv_budget_writes_runs_a_table_and_a_figure(llama_dir, texts, tmp_path, capsys):
    out, figure = tmp_path / "kv.json", tmp_path / "kv.png"
    args = ["model", "kv-budget", "--model", str(llama_dir), *texts, "--max-tokens", "60"]
    args += ["--window", "8", "--sinks", "2", "--budgets", "0.5,1", "--seeds", "3"]
    code, printed, err = run([*args, "--out", str(out), "--figure", str(figure)], capsys)
    assert code == 0, err
    result = KVBudgetResult.from_dict(json.loads(out.read_text()))
    kinds = [(r.kind, r.budget) for r in result.runs]
    assert kinds[0] == ("full", 0.0) and ("chosen", 1.0) in kinds and ("opposite", 0.5) in kinds
    assert sum(k == "random" for k, _ in kinds) == 6
    every = [r for r in result.runs if r.budget == 1.0]
    assert len({round(r.perplexity, 9) for r in every}) == 1  # all groups windowed: one plan
    # every K/V group keeps sinks + window = 10 of the text's 1 + 12 + 30 + 12 tokens
    assert result.n_tokens == 55 and every[0].kv_saved == pytest.approx(55 / 10)
    assert "KV budget" in printed and "copy accuracy" in printed
    assert figure.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--budgets", "0"], "--budgets must be shares in (0, 1], got 0.0"),
        (["--budgets", "0.5,1.5"], "--budgets must be shares in (0, 1], got 1.5"),
        (["--budgets", "half"], "--budgets takes comma-separated numbers, got 'half'"),
        (["--window", "0"], "--window must be between 1"),
        (["--sinks", "-1"], "--sinks must be between 0"),
        (
            ["--max-tokens", "9", "--window", "8"],
            "--max-tokens 9 is not longer than sinks 4 + window 8",
        ),
        (["--max-tokens", "600"], "--max-tokens must be between 2 and 64"),
        (["--seeds", "2"], "--seeds must be between 3 and 100, got 2"),
        (["--seeds", "101"], "--seeds must be between 3 and 100, got 101"),
        (["--seed", "-1"], "--seed must be between 0"),
        (["--kv-saved", "1"], "--kv-saved must be numbers > 1 (full / planned KV memory), got 1.0"),
        (
            ["--kv-saved", "9", "--max-tokens", "40", "--window", "8"],
            "--kv-saved 9 is out of reach: windowing every K/V group to 12 of 40 tokens saves",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(extra, message, llama_dir, texts, tmp_path, capsys):
    out = tmp_path / "kv.json"
    args = ["model", "kv-budget", "--model", str(llama_dir), *texts, *extra, "--out", str(out)]
    code, printed, err = run(args, capsys)
    assert code == 2 and printed == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_text_without_copies_is_refused(llama_dir, tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text(" ".join(f"t{i}" for i in range(60)), encoding="utf-8")
    args = ["model", "kv-budget", "--model", str(llama_dir), "--text-file", str(plain)]
    args += ["--calibration-file", str(plain), "--window", "8", "--out", str(tmp_path / "o.json")]
    code, _, err = run(args, capsys)
    assert code == 2 and "repeats no earlier passage" in err


def test_heads_on_one_long_text_prints_the_roles(llama_dir, tmp_path, capsys):
    text = tmp_path / "book.txt"
    text.write_text(_text(2), encoding="utf-8")
    out, figure = tmp_path / "lc.json", tmp_path / "roles.png"
    args = ["model", "heads", "--model", str(llama_dir), "--text-file", str(text)]
    code, printed, err = run(
        [*args, "--window", "8", "--out", str(out), "--figure", str(figure)], capsys
    )
    assert code == 0, err
    shown = " ".join(printed.split())
    assert "head roles: window 4 sinks + 8 recent keys; 6 copy positions" in shown
    assert "role of each head" in shown and "the numbers behind each role" in shown
    roles = json.loads(out.read_text())["roles"]
    assert roles["copy_positions"] == 6 and len(roles["roles"]) == 3
    assert figure.read_bytes().startswith(b"\x89PNG")
    code, _, err = run([*args, "--window", "500", "--out", str(out)], capsys)
    assert code == 2 and "not more than sinks 4 + window 500" in err


def test_kv_saved_plans_for_a_memory_saving(llama_dir, texts, tmp_path, capsys):
    out = tmp_path / "kv.json"
    args = ["model", "kv-budget", "--model", str(llama_dir), *texts, "--max-tokens", "60"]
    args += ["--window", "8", "--sinks", "2", "--kv-saved", "1.5,2", "--out", str(out)]
    code, printed, err = run(args, capsys)
    assert code == 0, err
    result = KVBudgetResult.from_dict(json.loads(out.read_text()))
    chosen = [r for r in result.runs if r.kind == "chosen"]  # no --budgets: the savings only
    # 6 groups, 55 tokens, 10 kept: ceil(6 (1 - 1/r) / (1 - 10/55)) = 3 and 4 groups
    assert [(len(r.groups), r.target_kv_saved) for r in chosen] == [(3, 1.5), (4, 2.0)]
    assert all(r.kv_saved >= r.target_kv_saved for r in chosen)
    assert "KV budget" in printed


def test_the_built_in_texts_on_a_short_context_name_no_flag(texts, tmp_path, capsys):
    from model_files import byte_llama

    # one token a byte: the shortest passage (8 words, ~50 bytes) twice is more than 64 / 2
    folder = byte_llama(tmp_path / "byte-llama", 64)
    capsys.readouterr()  # transformers' bar while it saves
    args = ["model", "kv-budget", "--model", str(folder), "--window", "8", *texts[:2]]
    code, printed, err = run([*args, "--out", str(tmp_path / "o.json")], capsys)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1
    assert "context of 64 tokens cannot hold the built-in copy task" in err
    assert "--max-tokens" not in err and "--calibration-file" in err
    assert "shorter passage" not in err  # no option gives one


def test_the_retrieval_line_says_what_was_masked(llama_dir, texts, tmp_path, capsys):
    out = tmp_path / "kv.json"
    args = ["model", "kv-budget", "--model", str(llama_dir), *texts, "--window", "8"]
    args += ["--budgets", "0.5", "--out", str(out)]
    code, printed, err = run([*args, "--retrieval-k", "9"], capsys)
    assert code == 0, err
    check = json.loads(out.read_text())["retrieval"]
    assert [len(drawn) for drawn in check["random_heads"]] == [9, 9, 9] and len(check["heads"]) == 9
    shown = " ".join(printed.split())
    assert "top 9 retrieval heads masked" in shown and "with 9 random heads masked" in shown
    code, printed, err = run([*args, "--retrieval-k", "10", "--force"], capsys)
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1
    assert "--retrieval-k must be between 1 and 9 for " in err and "18 heads" in err


def test_a_held_out_text_cut_says_so(llama_dir, tmp_path, capsys):
    from tokenizers import Tokenizer

    long = tmp_path / "long.txt"
    long.write_text(_text(3) + " " + " ".join(f"t{i % 50}" for i in range(20)), encoding="utf-8")
    calibration = tmp_path / "calibration.txt"
    calibration.write_text(_text(5), encoding="utf-8")
    out = tmp_path / "kv.json"
    args = [
        "model",
        "kv-budget",
        "--model",
        str(llama_dir),
        "--text-file",
        str(long),
        "--calibration-file",
        str(calibration),
        "--window",
        "8",
        "--max-tokens",
        "60",
        "--budgets",
        "0.5",
        "--out",
        str(out),
    ]
    code, printed, err = run(args, capsys)
    assert code == 0, err
    whole = len(Tokenizer.from_file(str(llama_dir / "tokenizer.json")).encode(long.read_text()))
    assert whole == 75  # 1 + 12 + 30 + 12 + 20 words, one token each
    result = KVBudgetResult.from_dict(json.loads(out.read_text()))
    assert (result.held_out.n_tokens, result.held_out.text_tokens) == (60, whole)
    assert result.held_out.truncated and result.n_tokens == 60
    assert not result.calibration.truncated and result.calibration.text_tokens == 55
    shown = " ".join(printed.split())
    assert "the held-out text: 60 tokens (cut from at least 75: the rest was not analysed)" in shown
    assert "calibration text:" not in shown


def test_a_small_model_runs_with_the_defaults(tmp_path_factory, capsys):
    """A 512-token byte-level model: 48 words twice (about 700 bytes) do not fit, so the
    built-in passage is shortened to fit half the context; no file is needed."""
    from tokenizers import Tokenizer

    from model_files import byte_llama

    folder = byte_llama(tmp_path_factory.mktemp("byte-llama"), 512)
    out = tmp_path_factory.mktemp("kv") / "kv.json"
    code, printed, err = run(
        ["model", "kv-budget", "--model", str(folder), "--budgets", "0.5", "--out", str(out)],
        capsys,
    )
    assert code == 0, err
    result = KVBudgetResult.from_dict(json.loads(out.read_text()))
    assert result.texts.startswith("built-in copy task") and result.copy_positions > 0
    assert 256 + 4 < result.n_tokens <= 512 and not result.held_out.truncated
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    from headlab.heads.repeats import copy_task
    from headlab.models import load

    model = load(folder)
    held_out = copy_task(model, 512, seed=0, part=1, parts=2)
    assert 8 <= held_out.passage_words < 48
    passage = " ".join(held_out.text.split()[-held_out.passage_words :])
    assert 2 * len(tokenizer.encode(passage)) <= 256  # both copies within half the context
    assert "KV budget" in printed


def test_a_retrieval_k_over_half_the_heads_is_refused_before_the_weights_load(
    llama_dir, texts, tmp_path, capsys
):
    """Issue 31: the refusal came only after the model loaded. A folder with the tiny model's
    config.json and weights that are not safetensors at all: the load would fail on them, so
    the --retrieval-k line proves the check ran first, on the config's 18 heads."""
    import shutil

    folder = tmp_path / "config-only"
    folder.mkdir()
    for path in llama_dir.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copy(path, folder / path.name)
    (folder / "model.safetensors").write_bytes(b"not weights at all")
    args = ["model", "kv-budget", "--model", str(folder), *texts, "--window", "8"]
    code, printed, err = run(
        [*args, "--retrieval-k", "10", "--out", str(tmp_path / "o.json")], capsys
    )
    assert code == 2 and printed == "" and len(err.strip().splitlines()) == 1, err
    assert "--retrieval-k must be between 1 and 9 for " in err and "18 heads" in err
    assert not (tmp_path / "o.json").exists()
