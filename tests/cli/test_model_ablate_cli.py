"""``headlab model ablate`` on the tiny random BERT: the table, the JSON document, bad input."""

from __future__ import annotations

import json

import pytest

from headlab.cli.main import main

LINES = [
    "The first line of the corpus has a few words.",
    "A second line, with punctuation!",
    "and a fourth line to make batches",
    "five words in this line",
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def test_ablate_prints_and_writes_the_objective_with_and_without(
    tiny_dir, corpus, tmp_path, capsys
):
    out = tmp_path / "ablate.json"
    args = ["model", "ablate", "--ablate", "1.2,0.0", "--model-dir", str(tiny_dir)]
    main([*args, "--corpus", str(corpus), "--out", str(out), "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["heads"] == [[1, 2], [0, 0]] and printed["mode"] == "zero"
    assert printed["change"] == pytest.approx(printed["ablated"] - printed["baseline"])
    main([*args, "--corpus", str(corpus), "--out", str(out), "--mode", "mean"])
    assert "Ablation" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ablate", "1:2"], "--ablate must be LAYER.HEAD pairs"),
        (["--ablate", "5.0"], "error: --ablate 5.0: layer 5 out of range, expected 0 to 1 ("),
        (["--ablate", "1.0,0.3"], "error: --ablate 0.3: head 3 out of range in layer 0, expected"),
        (["--ablate", "1.0", "--mode", "half"], "--mode must be zero, mean or resample"),
    ],
)
def test_bad_ablate_input_is_one_line_and_exit_2(
    extra, message, tiny_dir, corpus, tmp_path, capsys
):
    argv = ["model", "ablate", "--model-dir", str(tiny_dir), "--corpus", str(corpus)]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, *extra, "--out", str(tmp_path / "a.json")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and message in err and len(err.splitlines()) == 1
