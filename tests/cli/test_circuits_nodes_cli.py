"""``headlab circuits --method nodes | nodes-ig | head-patching`` end to end on a tiny random Llama
(GQA) with the circuits tests' word tokenizer: the results file holds the library's own scores on
the same pairs (the library itself is checked against transformers' own model in
tests/circuits/test_node_attribution.py) and reads back through ``NodeScores.from_dict``, the
table fits 80 columns, and the options that belong to edges are refused in one line before the
model loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "circuits"))
from task_tokenizers import tiny_llama, word_tokenizer

from headlab.results.node_scores import NodeScores

SMALL = ["--length", "7", "--n-pairs", "2"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("circuit-nodes") / "tiny"
    tokenizer = word_tokenizer()
    tiny_llama(tokenizer).model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _expected(tiny_dir, method: str, by_position: bool) -> NodeScores:
    """The same run from the library, on the same pairs, without the CLI."""
    from headlab.circuits.node_run import run_nodes
    from headlab.circuits.run import CircuitRequest, prepare
    from headlab.circuits.tasks import TaskRequest
    from headlab.models import load

    model = load(tiny_dir)
    request = CircuitRequest(
        TaskRequest("induction", n_pairs=2, length=7),
        method=method,
        top=5,
        steps=3,
        by_position=by_position,
    )
    return run_nodes(model, prepare(model, request))


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("nodes", []),
        ("nodes-ig", ["--steps", "3", "--by-position"]),
        ("head-patching", ["--by-position"]),
    ],
)
def test_each_node_method_end_to_end(tiny_dir, tmp_path, capsys, method, extra):
    out = tmp_path / "n.json"
    argv = [
        "circuits",
        "--model-dir",
        str(tiny_dir),
        "--method",
        method,
        "--top",
        "5",
        *SMALL,
        *extra,
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[0].startswith("induction: accuracy"), stdout  # performance first
    assert max(len(line) for line in lines) <= 80, stdout
    assert "…" not in stdout and lines[-1] == f"wrote {out}"
    data = json.loads(out.read_text())
    assert data.pop("headlab") == "circuit-nodes"
    result = NodeScores.from_dict(data)
    want = _expected(tiny_dir, method, "--by-position" in extra)
    assert result.nodes == want.nodes and "0.g0" in result.nodes
    assert result.scores == pytest.approx(want.scores, rel=1e-6, abs=1e-6)
    assert result.performance == want.performance and result.task == "induction"
    assert (result.by_position is None) == ("--by-position" not in extra)
    top = result.top(1)[0][0]
    assert f" 1 │ {top} " in stdout, stdout  # the strongest node first


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "nodes", "--figure", "x.png"], "--figure draws a circuit of edges"),
        (
            ["--method", "head-patching", "--faithfulness-figure", "x.png"],
            "--faithfulness-figure is a curve of circuits of edges",
        ),
        (["--method", "eap", "--by-position"], "--by-position applies to methods nodes"),
        (
            ["--method", "nodes", "--edges", "0.0->logits"],
            "--edges applies to method path-patching",
        ),
        (
            ["--method", "nodes", "--top", "1000"],
            "--top must be at most 10 (the nodes nodes scores",
        ),
        (["--method", "nodez"], "--method must be one of"),
    ],
)
def test_options_of_edges_are_refused_in_one_line(tiny_dir, tmp_path, capsys, extra, message):
    argv = [
        "circuits",
        "--model-dir",
        str(tiny_dir),
        *SMALL,
        "--out",
        str(tmp_path / "n.json"),
        *extra,
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 2, (stdout, err)
    lines = [line for line in err.splitlines() if line.startswith("headlab: error")]
    assert len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "n.json").exists()
