"""headlab expressivity, specialisation, redundancy and grad --talking-heads through the CLI."""

from __future__ import annotations

import json

import pytest

from cli_run import run


def test_grad_talking_heads_is_not_block_diagonal(capsys):
    args = ["grad", "--d-model", "24", "--heads", "4", "--talking-heads", "0.5", "--json"]
    code, out, _ = run(args, capsys)
    doc = json.loads(out)
    assert code == 0 and doc["talking_heads"] == 0.5
    assert doc["sides"][0]["kind"] == " (talking heads)"
    assert doc["sides"][0]["off_diagonal_max"] > 0.0


def test_expressivity_json_rows(tmp_path, capsys):
    out_file = tmp_path / "e.json"
    args = [
        "expressivity",
        "--seq-lens",
        "5,7",
        "--head-dims",
        "1,7",
        "--targets",
        "1",
        "--steps",
        "20",
        "--model",
        "none",
        "--out",
        str(out_file),
        "--json",
        "--figure",
        str(tmp_path / "e.png"),
    ]
    code, out, err = run(args, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["headlab"] == "expressivity"
    assert {(r["head_dim"], r["seq_len"]) for r in doc["rank"]} == {(1, 5), (7, 5), (1, 7), (7, 7)}
    assert all(isinstance(r["kl"], float) for r in doc["rank"])
    assert [p["num_heads"] for p in doc["patterns"]] == [1, 4]
    assert json.loads(out_file.read_text()) == doc
    assert (tmp_path / "e.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["expressivity", "--seq-lens", "a"], "--seq-lens takes comma-separated integers"),
        (["expressivity", "--head-dims", "0"], "--head-dims values must be positive, got 0"),
        (["grad", "--talking-heads", "nan"], "--talking-heads must be a finite number"),
    ],
)
def test_bad_input_one_line_exit_2(args, message, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_specialisation_json_and_figure(tmp_path, capsys):
    files = ["--out", str(tmp_path / "s.json"), "--figure", str(tmp_path / "s.png")]
    args = ["specialisation", "--heads", "1,2", "--steps", "10", "--eval-every", "5", *files]
    args.append("--json")
    code, out, err = run(args, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["headlab"] == "specialisation"
    assert [(r["attention"], r["num_heads"]) for r in doc["runs"]] == [
        ("plain", 1),
        ("plain", 2),
        ("talking-heads", 2),
    ]
    assert (tmp_path / "s.png").read_bytes().startswith(b"\x89PNG")


def test_specialisation_bad_attention(capsys):
    code, out, err = run(["specialisation", "--attention", "fancy"], capsys)
    assert code == 2 and out == "" and "--attention must be one of plain, talking-heads" in err


def test_redundancy_json_on_a_tiny_model(tiny_dir, tmp_path, capsys):
    files = ["--out", str(tmp_path / "r.json"), "--figure", str(tmp_path / "r.png")]
    args = ["redundancy", "--model", str(tiny_dir), "--ranks", "15,3", "--n-texts", "4", *files]
    code, out, err = run([*args, "--max-length", "12", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["headlab"] == "redundancy" and doc["qk_width"] == 15
    assert [r["rank"] for r in doc["curve"]] == [15, 15, 3]
    assert doc["curve"][1]["mean_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert (tmp_path / "r.png").read_bytes().startswith(b"\x89PNG")


def test_a_rank_wider_than_the_model_is_refused_before_the_work(
    tiny_dir, tmp_path, capsys, monkeypatch
):
    """Checked before the spectra (it used to be checked when cutting: 74 s of MiniLM first)."""
    import headlab.heads.redundancy

    def never(*args, **kwargs):
        raise AssertionError("measured before --ranks was checked")

    monkeypatch.setattr(headlab.heads.redundancy, "shared_subspaces", never)
    args = ["redundancy", "--model", str(tiny_dir), "--ranks", "15,16", "--max-length", "12"]
    code, out, err = run([*args, "--out", str(tmp_path / "r.json")], capsys)
    assert code == 2 and out == "" and not (tmp_path / "r.json").exists()
    assert err == "headlab: error: --ranks must be between 1 and 15, got 16\n"
