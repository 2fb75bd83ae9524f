"""``headlab circuits --method composition --rotary-offsets``: the results file's Q- and K-scores
equal Elhage et al.'s formula with rotary written out here in float64 from the saved tiny Llama's
own parameters (3 query heads on 1 K/V head, head_dim 8, rope_theta 10000): per offset delta the
receiver reads W_Q^T R(-delta) W_K, R built by hand as 2 x 2 rotations of dimensions (k, k + 4)
by delta * theta^(-2k/8); several offsets (and a K/V group's query heads) are stacked. Bad values
are one line and exit 2, before the model loads where they can be known then."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from cli_run import run

sys.path.insert(0, str(Path(__file__).parents[1] / "circuits"))
from task_tokenizers import tiny_llama, word_tokenizer

from headlab.results.circuit_run import CircuitRun

SMALL = ["--length", "7", "--n-pairs", "2", "--top", "5"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rotary") / "tiny"
    tokenizer = word_tokenizer()
    model = tiny_llama(tokenizer).model
    with torch.no_grad():  # norm scales away from 1, so that folding them is checked
        for block in model.model.layers:
            block.input_layernorm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _turn(delta: int, d: int, theta: float) -> torch.Tensor:
    """R(delta), (d, d) float64: dimensions k and k + d/2 turned by delta * theta^(-2k/d)."""
    out = torch.eye(d, dtype=torch.float64)
    for k in range(d // 2):
        angle = delta * theta ** (-2 * k / d)
        a, b = k, k + d // 2
        out[a, a], out[a, b] = math.cos(angle), -math.sin(angle)
        out[b, a], out[b, b] = math.sin(angle), math.cos(angle)
    return out


@torch.no_grad()
def _expected(folder: Path, offsets: list[int]) -> dict[str, float]:
    """edge name -> the rotary-aware score, from dense embed x embed float64 products."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    config = model.config
    heads, d = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    layers = []
    for block in model.model.layers:
        g = block.input_layernorm.weight.double()
        attn = block.self_attn
        q = attn.q_proj.weight.double().view(heads, d, -1) * g
        k = attn.k_proj.weight.double() * g  # (d, embed): one K/V head
        v = attn.v_proj.weight.double() * g
        o = attn.o_proj.weight.double().view(-1, heads, d)
        layers.append((q, k, v, o))
    fro = torch.linalg.matrix_norm
    out = {}
    _, _, v0, o0 = layers[0]
    q1, k1, _, _ = layers[1]
    reads = {
        j: [q1[j].t() @ _turn(-delta, d, theta) @ k1 for delta in offsets] for j in range(heads)
    }
    for i in range(heads):
        ov = o0[:, i] @ v0  # (embed, embed): what 0.i writes
        for j in range(heads):
            num = sum(float(fro(m.t() @ ov)) ** 2 for m in reads[j])
            den = sum(float(fro(m)) ** 2 for m in reads[j]) * float(fro(ov)) ** 2
            out[f"0.{i}->1.{j}<q>"] = math.sqrt(num / den)
        stack = [m for j in range(heads) for m in reads[j]]  # the group's query heads x offsets
        num = sum(float(fro(m @ ov)) ** 2 for m in stack)
        den = sum(float(fro(m)) ** 2 for m in stack) * float(fro(ov)) ** 2
        out[f"0.{i}->1.g0<k>"] = math.sqrt(num / den)
    return out


def _scores(path: Path) -> CircuitRun:
    data = json.loads(path.read_text())
    assert data.pop("headlab") == "circuits"
    return CircuitRun.from_dict(data)


@pytest.mark.parametrize("offsets", [[1], [1, 3, 40]])
def test_rotary_composition_equals_the_float64_formula(tiny_dir, tmp_path, capsys, offsets):
    argv = ["circuits", "--model-dir", str(tiny_dir), "--method", "composition", *SMALL]
    out, plain_out = tmp_path / "rotary.json", tmp_path / "plain.json"
    text = ",".join(str(o) for o in offsets)
    code, stdout, err = run([*argv, "--rotary-offsets", text, "--out", str(out)], capsys)
    assert code == 0, err
    assert f"rotary at offsets {', '.join(map(str, offsets))}" in stdout
    assert max(len(line) for line in stdout.splitlines()) <= 80, stdout
    code, plain_stdout, err = run([*argv, "--out", str(plain_out)], capsys)
    assert code == 0, err
    assert "without rotary" in plain_stdout
    result, plain = _scores(out), _scores(plain_out)
    assert result.rotary_offsets == offsets and plain.rotary_offsets is None
    got = dict(zip(result.scores.edges, result.scores.scores, strict=True))
    before = dict(zip(plain.scores.edges, plain.scores.scores, strict=True))
    moved = 0.0
    for edge, want in _expected(tiny_dir, offsets).items():
        assert got[edge] == pytest.approx(want, rel=1e-5, abs=1e-7), edge
        moved = max(moved, abs(got[edge] - before[edge]))
    assert moved > 1e-3  # rotary moves the scores, so the check above can fail
    for edge, value in got.items():  # values carry no positions
        if edge.endswith("<v>"):
            assert value == pytest.approx(before[edge], abs=1e-9)
    assert CircuitRun.from_dict(result.to_dict()) == result


def test_offset_zero_is_the_score_without_rotary(tiny_dir, tmp_path, capsys):
    argv = ["circuits", "--model-dir", str(tiny_dir), "--method", "composition", *SMALL]
    assert run([*argv, "--rotary-offsets", "0", "--out", str(tmp_path / "a.json")], capsys)[0] == 0
    assert run([*argv, "--out", str(tmp_path / "b.json")], capsys)[0] == 0
    zero, plain = _scores(tmp_path / "a.json"), _scores(tmp_path / "b.json")
    assert zero.scores.scores == pytest.approx(plain.scores.scores, abs=2e-6)


def _one_line(argv, capsys, message):
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("headlab: error:"), err
    assert "Traceback" not in err and message in err, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rotary-offsets", "1,x"], "--rotary-offsets takes comma-separated integers, got 'x'"),
        (["--rotary-offsets", "-1"], "--rotary-offsets values must be >= 0, got -1"),
        (["--rotary-offsets", "1,1"], "--rotary-offsets must be distinct, got [1, 1]"),
        (["--rotary-offsets", "2000000"], "--rotary-offsets must be between 0 and 1048576"),
        (
            ["--method", "eap", "--rotary-offsets", "1"],
            "--rotary-offsets applies to method composition only, got method eap",
        ),
    ],
)
def test_bad_offsets_before_the_model_loads(tmp_path, capsys, monkeypatch, extra, message):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)
    argv = [
        "circuits",
        "--model-dir",
        str(tmp_path),
        "--method",
        "composition",
        *extra,
        "--out",
        str(tmp_path / "c.json"),
    ]
    _one_line(argv, capsys, message)
    assert not (tmp_path / "c.json").exists()


def test_offset_beyond_the_positions_after_load_before_the_work(tiny_dir, tmp_path, capsys):
    out = tmp_path / "c.json"
    _one_line(
        [
            "circuits",
            "--model-dir",
            str(tiny_dir),
            "--method",
            "composition",
            *SMALL,
            "--rotary-offsets",
            "1,1024",
            "--out",
            str(out),
        ],
        capsys,
        "--rotary-offsets must lie in 0..1023 (the model's positions), got 1024",
    )
    assert not out.exists()
