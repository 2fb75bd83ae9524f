"""The compare, grad and params commands through the CLI's own entry point."""

from __future__ import annotations

import json

import pytest

from cli_run import run


def torch_difference(seed: int) -> float:
    """max |8 heads - 1 head| of the asker's set-up (the defaults) through
    torch.nn.MultiheadAttention: the same draws, an outside implementation of the forward."""
    import torch

    from headlab.analysis.scenarios import CompareRequest, build

    ours, _, x = build(CompareRequest(seed=seed))
    outs = []
    for heads in (8, 1):
        theirs = torch.nn.MultiheadAttention(512, heads, bias=False, batch_first=True)
        with torch.no_grad():
            theirs.in_proj_weight.copy_(ours.in_proj_weight)
            theirs.out_proj.weight.copy_(ours.out_proj.weight)
            outs.append(theirs(x, x, x, need_weights=False)[0])
    return float((outs[0] - outs[1]).abs().max())


@pytest.mark.parametrize("seed", [0, 1])
def test_compare_default_measures_the_first_seed_question(seed, capsys):
    code, out, err = run(["compare", "--seed", str(seed), "--json"], capsys)
    assert code == 0 and err == ""
    doc, expected = json.loads(out), torch_difference(seed)
    assert doc["max_abs_diff"] == pytest.approx(expected, rel=1e-3, abs=1e-6)
    assert doc["identical"] == (expected == 0.0)
    code, out, err = run(["compare", "--seed", str(seed)], capsys)
    verdict = "identical" if doc["identical"] else doc["verdict"]
    assert code == 0 and out.startswith(f"verdict: {verdict}")
    assert "8 heads of 64 and 1 head of 512" in " ".join(out.split())


def test_compare_shows_each_finding_once_and_explains_from_its_measures(capsys):
    code, out, _ = run(["compare", "--seed", "1"], capsys)
    doc = json.loads(run(["compare", "--seed", "1", "--json"], capsys)[1])
    assert code == 0 and len(doc["findings"]) >= 2
    flat = " ".join(out.split())
    for finding in doc["findings"]:
        assert out.count(finding["code"]) == 1  # one row of the table, nowhere else
        assert f"in {finding['measures']['rows']} of {finding['measures']['of_rows']} rows" in flat


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


def test_grouped_kv_heads_work_with_the_default_vs_heads(capsys):
    """With 8 heads on 2 K/V heads of 8 (width 16), one head of 64 cannot split K/V: the default
    is the fewest that can (4 heads of 16), and a bad --vs-heads says which counts work."""
    from headlab.analysis.scenarios import CompareRequest, build

    code, out, err = run(
        ["compare", "--kv-heads", "2", "--d-model", "64", "--heads", "8", "--json"], capsys
    )
    assert code == 0 and err == "", err
    assert json.loads(out)["params"]["a"] == json.loads(out)["params"]["b"]
    setup = CompareRequest(d_model=64, heads=8, kv_heads=2, vs_heads=None)
    _, other, _ = build(setup)
    assert setup.vs_heads == 4
    assert (other.num_heads, other.num_kv_heads, other.head_dim) == (4, 1, 16)
    code, _, err = run(
        ["compare", "--kv-heads", "2", "--d-model", "64", "--heads", "8", "--vs-heads", "2"], capsys
    )
    assert code == 2
    assert "--vs-heads 2 gives heads of 32, which do not split the K/V width 16" in err
    assert "--vs-heads can be 4, 8, 16, 32, 64" in err
    code, out, err = run(
        ["grad", "--kv-heads", "2", "--d-model", "64", "--heads", "8", "--json"], capsys
    )
    assert code == 0 and [s["num_heads"] for s in json.loads(out)["sides"]] == [8, 4], err


@pytest.mark.parametrize(
    ("argv", "advice", "not_advice"),
    [
        (["--d-model", "16777216"], "lower --d-model 16777216 (the weights", "--seq-len"),
        (["--seq-len", "40000"], "lower --seq-len 40000 or --batch 2 (attention", "--d-model 5"),
        (
            ["--d-model", "64", "--heads", "2", "--head-dim", "8000000", "--output-projection"],
            "lower --d-model 64 or --head-dim 8000000 (the weights",
            "--seq-len",
        ),
    ],
)
def test_a_refusal_names_what_dominates_the_estimate(capsys, argv, advice, not_advice):
    code, _, err = run(["compare", *argv], capsys)
    assert code == 2 and "more than half of this machine's" in err, err
    said = err.split("refused before starting; ")[1]
    assert said.startswith(advice) and not_advice not in said, err


def test_compare_prints_only_the_plain_result(capsys, monkeypatch):
    """The command reads the ``ComparisonResult`` and nothing else of the measurement: a stand-in
    whose only member is ``result()`` (no tensors, no findings with rows) prints the same table,
    explanation and document as the real comparison of the same set-up."""
    import headlab.analysis.scenarios as scenarios

    argv = ["compare", "--d-model", "15", "--heads", "5", "--seq-len", "7", "--causal"]
    real = [run(argv, capsys), run([*argv, "--json"], capsys)]
    measured = scenarios.run_setup

    class OnlyTheResult:
        def __init__(self, setup):
            self._result = measured(setup).result()

        def result(self):
            return self._result

    monkeypatch.setattr(scenarios, "run_setup", OnlyTheResult)
    assert [run(argv, capsys), run([*argv, "--json"], capsys)] == real
    assert real[0][0] == 0 and "5 heads of 3 and 1 head of 15" in " ".join(real[0][1].split())


def test_grad_prints_the_typed_result_as_its_document_says(capsys):
    """The table's numbers are the ``--json`` document's (``CouplingComparison.to_dict``)."""
    argv = ["grad", "--d-model", "15", "--heads", "5", "--seq-len", "7"]
    code, out, _ = run([*argv, "--json"], capsys)
    document = json.loads(out)
    code_table, table, _ = run(argv, capsys)
    assert code == code_table == 0
    for side in document["sides"]:
        assert f"off-diagonal max {side['off_diagonal_max']:.3g}" in table
        norms = " ".join(f"{v:.3g}" for v in side["head_gradient_norms"]["w_q"])
        assert f"W_Q: {norms}" in " ".join(table.split())
