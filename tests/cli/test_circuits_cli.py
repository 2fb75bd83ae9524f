"""``headlab circuits`` end to end on a tiny random Llama (GQA: 3 query heads on 1 K/V head) with
the circuits tests' word tokenizer: each method's scores in the results file equal the library's
own on the same pairs (path patching itself is checked against hooks on transformers' eager
model in tests/circuits/test_path_patching.py), the file reads back through ``from_dict``, the
figures are written and marked as headlab's, the table fits 80 columns, and every bad input is
one line and exit 2, before the model loads where it can be known then."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "circuits"))
from task_tokenizers import tiny_llama, word_tokenizer

from headlab.results.circuit_run import CircuitRun
from headlab.results.output_policy import png_text_chunks

SMALL = ["--length", "7", "--n-pairs", "2"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("circuits") / "tiny"
    tokenizer = word_tokenizer()
    tiny_llama(tokenizer).model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _read(path: Path) -> CircuitRun:
    data = json.loads(path.read_text())
    assert data.pop("headlab") == "circuits"
    return CircuitRun.from_dict(data)


def _expected(tiny_dir, method: str, steps: int = 5):
    """The same run's scores from the library, on the same pairs, without the CLI."""
    from headlab.circuits.run import CircuitRequest, needs_equal_lengths, prepare, run_circuits
    from headlab.circuits.tasks import TaskRequest
    from headlab.models import load

    model = load(tiny_dir)
    task = TaskRequest("induction", n_pairs=2, length=7, equal_lengths=needs_equal_lengths(method))
    request = CircuitRequest(task, method=method, top=5, steps=steps)
    return run_circuits(model, prepare(model, request))


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("eap", []),
        ("eap-ig", ["--steps", "3"]),
        ("path-patching", []),
        ("composition", []),
        ("eap-ig-senders", ["--steps", "3"]),
    ],
)
def test_each_method_end_to_end(tiny_dir, tmp_path, capsys, method, extra):
    out, figure = tmp_path / "c.json", tmp_path / "c.png"
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
        "--figure",
        str(figure),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    lines = stdout.splitlines()
    if method == "composition":  # the weights only: the model does not run on the task
        assert lines[0] == "composition reads the weights only: the model was not run on the task"
    else:
        assert lines[0].startswith("induction: accuracy"), stdout  # performance first
    assert max(len(line) for line in lines) <= 80, stdout
    assert "…" not in stdout
    result = _read(out)
    assert CircuitRun.from_dict(result.to_dict()) == result
    steps = 3 if method.startswith("eap-ig") else 5
    want = _expected(tiny_dir, method, steps)
    assert result.scores.edges == want.scores.edges
    # float32 model: a zero effect comes back as float32 rounding where the CLI runs on one
    # thread (when busy) and the library on torch's threads
    assert result.scores.scores == pytest.approx(want.scores.scores, rel=1e-6, abs=1e-6)
    assert result.performance == want.performance
    assert len(result.top_edges()) == 5
    for edge, _ in result.top_edges():
        assert edge.split("->")[0] in stdout
    assert png_text_chunks(figure.read_bytes()[:4096]).get("headlab") == "circuits"


def test_faithfulness_curve_and_its_figure(tiny_dir, tmp_path, capsys):
    out, curve = tmp_path / "c.json", tmp_path / "curve.png"
    argv = [
        "circuits",
        "--model-dir",
        str(tiny_dir),
        "--task",
        "ioi",
        "--n-pairs",
        "3",
        "--top",
        "4",
        "--out",
        str(out),
        "--faithfulness-figure",
        str(curve),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    found = _read(out).faithfulness
    assert found is not None and found.sizes[-1] == found.edges
    assert found.faithfulness[-1] == pytest.approx(1.0, abs=1e-5)  # every edge clean = clean
    assert f"CPR {found.cpr:.3f}" in stdout
    assert png_text_chunks(curve.read_bytes()[:4096]).get("headlab") == "circuits"


def _no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)


def one_line(argv, capsys, message):
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("headlab: error:"), err
    assert "Traceback" not in err and message in err, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--task", "sorting"], "--task must be one of induction, copy, ioi, greater-than"),
        (["--method", "acdc"], "--method must be one of composition, path-patching, eap, eap-ig,"),
        (["--method", "eap-ig", "--steps", "0"], "--steps must be between 1"),
        (["--top", "0"], "--top must be between 1"),
        (["--task", "ioi", "--length", "5"], "length applies to induction and copy only"),
        (
            ["--method", "eap", "--edges", "embed->logits"],
            "--edges applies to method path-patching only",
        ),
    ],
)
def test_bad_options_before_the_model_loads(tmp_path, capsys, monkeypatch, extra, message):
    _no_loading(monkeypatch)
    one_line(
        ["circuits", "--model-dir", str(tmp_path), *extra, "--out", str(tmp_path / "c.json")],
        capsys,
        message,
    )
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"clean": "a b", "corrupted": "a c"}\n', "line 1"),
        ("not json\n", "line 1"),
        ("", "expected at least one pair"),
    ],
)
def test_a_bad_pairs_file_before_the_model_loads(tmp_path, capsys, monkeypatch, text, message):
    _no_loading(monkeypatch)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(text)
    one_line(
        [
            "circuits",
            "--model-dir",
            str(tmp_path),
            "--pairs",
            str(pairs),
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
        message,
    )


def test_pairs_and_task_together_are_refused(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"clean": "Mary", "corrupted": "John", "answer": " Mary"}\n')
    one_line(["circuits", "--task", "ioi", "--pairs", str(pairs)], capsys, "not both")


def _pairs(tmp_path, row: dict) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def test_top_beyond_the_edges_after_load_before_the_work(tiny_dir, tmp_path, capsys):
    # the tiny Llama's graph has 51 edges: embed, 3 heads and an MLP per layer, 2 layers
    out = tmp_path / "c.json"
    one_line(
        ["circuits", "--model-dir", str(tiny_dir), *SMALL, "--top", "52", "--out", str(out)],
        capsys,
        "--top must be at most 51",
    )
    assert not out.exists()


def test_pairs_of_different_token_counts_where_the_method_needs_equal(tiny_dir, tmp_path, capsys):
    pairs = _pairs(
        tmp_path,
        {
            "clean": "When Mary and John went to the store",
            "corrupted": "When Mary went to the store",
            "answer": " John",
        },
    )
    argv = [
        "circuits",
        "--model-dir",
        str(tiny_dir),
        "--pairs",
        str(pairs),
        "--out",
        str(tmp_path / "c.json"),
    ]
    one_line([*argv, "--method", "eap"], capsys, "must have the same number of tokens")
    # composition reads the weights: pairs of different lengths are read, the model not run
    code, stdout, err = run([*argv, "--method", "composition", "--top", "3"], capsys)
    assert code == 0, err
    assert stdout.startswith("composition reads the weights only")


def test_answer_token_outside_the_vocabulary(tiny_dir, tmp_path, capsys):
    vocab = len(word_tokenizer())
    pairs = _pairs(
        tmp_path,
        {
            "clean": "When Mary and John went to the store",
            "corrupted": "When Kate and Tom went to the store",
            "answer": vocab + 7,
        },
    )
    one_line(
        [
            "circuits",
            "--model-dir",
            str(tiny_dir),
            "--pairs",
            str(pairs),
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
        f"must lie in the vocabulary 0..{vocab - 1}, got {vocab + 7}",
    )


def test_composition_prints_and_saves_the_random_baseline_beside_its_scores(
    tiny_dir, tmp_path, capsys, monkeypatch
):
    """Composition reads the weights: the task's forward never runs, and each top edge's
    row shows what random matrices of its shapes score (the library's baseline), saved too."""
    from headlab.circuits.composition import composition_scores
    from headlab.models import load

    def refuse(*args, **kwargs):
        raise AssertionError("the model ran on the task")

    monkeypatch.setattr("headlab.circuits.task_performance.forward_logits", refuse)
    out = tmp_path / "c.json"
    argv = [
        "circuits",
        "--model-dir",
        str(tiny_dir),
        "--method",
        "composition",
        "--top",
        "3",
        *SMALL,
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    result = _read(out)
    found = composition_scores(load(tiny_dir), samples=16)
    assert result.performance is None
    assert result.baseline == {m: pytest.approx(found.baseline_for(m)) for m in result.baseline}
    assert set(result.baseline) <= {"q", "k_group", "v_group"}  # 3 query heads on 1 K/V head
    header = next(line for line in stdout.splitlines() if "sender" in line)
    assert header.split("┃")[-2].strip() == "random"
    rows = [line.split("│")[1:-1] for line in stdout.splitlines() if line.startswith("│")]
    for (edge, _), row in zip(result.top_edges(), rows, strict=True):
        mode = edge.split("<")[1][0] + ("_group" if ".g" in edge.split("->")[1] else "")
        assert [c.strip() for c in (row[1], row[2], row[-1])] == [
            edge.split("->")[0],
            edge.split("->")[1].split("<")[0],
            f"{result.baseline[mode]:.3f}",
        ]


def test_path_patching_of_chosen_edges_and_the_refusal_of_every_edge(
    tiny_dir, tmp_path, capsys, monkeypatch
):
    """--edges as names or as an earlier run's top edges patches those alone (the library's
    values); every edge past the limit is refused in one line naming --edges, with the estimate,
    before any edge is patched."""
    eap = tmp_path / "eap.json"
    base = ["circuits", "--model-dir", str(tiny_dir), *SMALL, "--top", "3"]
    assert run([*base, "--out", str(eap)], capsys)[0] == 0
    top = [edge for edge, _ in _read(eap).top_edges()]
    out = tmp_path / "pp.json"
    code, _, err = run(
        [*base, "--method", "path-patching", "--edges", str(eap), "--out", str(out)], capsys
    )
    assert code == 0, err
    assert "headlab: path-patching 3 edges: about" in err
    patched = _read(out).scores
    assert patched.edges == top
    every = _expected(tiny_dir, "path-patching").scores
    want = dict(zip(every.edges, every.scores, strict=True))
    assert patched.scores == pytest.approx([want[e] for e in top], rel=1e-6, abs=1e-9)
    named = tmp_path / "named.json"
    assert (
        run(
            [
                *base,
                "--method",
                "path-patching",
                "--edges",
                ",".join(top[::-1]),
                "--out",
                str(named),
            ],
            capsys,
        )[0]
        == 0
    )
    assert _read(named).scores.edges == top[::-1]
    monkeypatch.setattr("headlab.circuits.run.PATCHING_LIMIT_S", 0.0)
    monkeypatch.setattr("headlab.circuits.patching.Patcher.effects", _never)
    one_line(
        [*base, "--method", "path-patching", "--out", str(tmp_path / "all.json")],
        capsys,
        "--edges must be chosen past 0 s: path-patching 51 edges: about",
    )
    code, _, err = run(
        [
            *base,
            "--method",
            "path-patching",
            "--edges",
            "0.0->0.g0<k>",
            "--out",
            str(tmp_path / "bad.json"),
        ],
        capsys,
    )
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("headlab: error: --edges must be edges of ")
    assert "no edge '0.0->0.g0<k>'" in err


def _never(*args, **kwargs):
    raise AssertionError("an edge was patched")


@pytest.mark.model
def test_an_encoder_is_refused_before_it_loads(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)
    one_line(
        ["circuits", "--model", "minilm", "--out", str(tmp_path / "c.json")],
        capsys,
        "all-MiniLM-L6-v2 is an encoder without a language-model head; the induction task "
        "needs next-token logits: use --model smollm2",
    )
    one_line(
        ["circuits", "--model", "minilm", "--task", "ioi", "--out", str(tmp_path / "c.json")],
        capsys,
        "the ioi task needs next-token logits",
    )
    assert not (tmp_path / "c.json").exists()


def test_the_default_model_is_a_language_model(tmp_path, capsys, monkeypatch):
    """Without --model or --model-dir the command outlines (then would load) smollm2; with
    --model-dir alone, that folder (the default never conflicts with it)."""
    import headlab.models.outline as outlines

    seen = []

    def record(name_or_path, **kwargs):
        seen.append(name_or_path)
        raise ValueError("stopped here")

    monkeypatch.setattr(outlines, "outline", record)
    one_line(["circuits", "--out", str(tmp_path / "c.json")], capsys, "stopped here")
    folder = tmp_path / "model"
    folder.mkdir()
    one_line(
        ["circuits", "--model-dir", str(folder), "--out", str(tmp_path / "c.json")],
        capsys,
        "stopped here",
    )
    assert seen == ["smollm2", folder]


@pytest.mark.model
@pytest.mark.parametrize(
    ("argv", "needed_by"),
    [
        (["model", "generate", "Hello"], "generating text"),
        (["model", "kv-budget"], "a KV budget"),
    ],
)
def test_other_commands_refuse_an_encoder_before_it_loads(
    tmp_path, capsys, monkeypatch, argv, needed_by
):
    _no_loading(monkeypatch)
    monkeypatch.chdir(tmp_path)
    one_line(
        [*argv, "--model", "minilm"],
        capsys,
        f"all-MiniLM-L6-v2 is an encoder without a language-model head; {needed_by} needs "
        "next-token logits: use --model smollm2",
    )
