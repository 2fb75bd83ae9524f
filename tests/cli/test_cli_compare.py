"""The compare, grad and params commands through the CLI's own entry point."""

from __future__ import annotations

import json

import pytest

from headlab.cli.main import main


def run(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return exit_.value.code or 0, out, err


def test_compare_default_reproduces_the_first_seed_question(capsys):
    code, out, err = run(["compare"], capsys)
    assert code == 0 and err == ""
    assert "verdict: identical" in out and "saturated_same_key" in out
    assert "8 heads of 64 and 1 head of 512" in " ".join(out.split())


def test_compare_json_is_the_documented_document_only(capsys):
    code, out, _ = run(
        ["compare", "--init", "normal", "--d-model", "48", "--heads", "4", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "different"
    assert set(doc) == {
        "verdict",
        "identical",
        "max_abs_diff",
        "rel_diff",
        "gradients_equal",
        "findings",
        "params",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "--heads", "3"], "--d-model 512 is not divisible by --heads 3"),
        (["compare", "--init", "zeros"], "init must be one of rand, normal, xavier, ones"),
        (["compare", "--seq-len", "0"], "--seq-len must be between 1 and 16777216, got 0"),
        (["compare", "--heads", "x"], "Invalid value for '--heads'"),
        (["params", "--heads", "1,a"], "--heads takes comma-separated integers, got 'a'"),
        (["grad", "--d-model", "64", "--heads", "5"], "--d-model 64 is not divisible by --heads 5"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args, message, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_grad_json_has_off_diagonal_max_per_head_count(capsys):
    code, out, _ = run(["grad", "--d-model", "24", "--heads", "4", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert [s["num_heads"] for s in doc["sides"]] == [4, 1]
    assert doc["sides"][0]["off_diagonal_max"] == 0.0
    assert doc["sides"][1]["off_diagonal_max"] > 0.0
    assert len(doc["sides"][0]["coupling"]) == 4


def test_params_table_and_json(capsys):
    code, out, _ = run(["params", "--d-model", "512", "--heads", "1,2,4,8,16", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and {r["total"] for r in rows} == {4 * 512 * 512 + 4 * 512}
    code, out, _ = run(["params", "--d-model", "64", "--heads", "8", "--kv-heads", "1,8"], capsys)
    assert code == 0 and "saved" in out


def test_ctrl_c_exits_130_without_a_traceback(capsys, monkeypatch):
    import headlab.analysis.scenarios as scenarios

    def interrupted(setup):
        raise KeyboardInterrupt

    monkeypatch.setattr(scenarios, "run_setup", interrupted)
    code, out, err = run(["compare"], capsys)
    assert code == 130 and out == "" and "Traceback" not in err and err.count("\n") <= 1
