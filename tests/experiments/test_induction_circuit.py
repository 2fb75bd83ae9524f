"""The induction circuit over training: the loop on a few steps is the sweep's own run (its
curve), each checkpoint's fields against transformers' own eager GPT-2 holding the sweep model's
weights (forward hooks, float64 formulas written here), the result's round trip and the command's
bad input."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from headlab.experiments.induction_circuit import (
    FormationRequest,
    induction_formation,
    k_edges,
    measure,
    task_pairs,
    train_and_measure,
)
from headlab.experiments.sweep_gpt2 import as_transformers
from headlab.experiments.tiny_transformer import TinyTransformer
from headlab.experiments.train import run_one
from headlab.heads.detectors import repeated_random_tokens
from headlab.report.induction_circuit_figures import write_formation_figure
from headlab.results.induction_circuit_result import InductionFormation
from headlab.results.json_store import read_result, write_result
from headlab.results.output_policy import png_text_chunks

H = 2  # heads per layer in the tiny checks (d_head 32)


def test_pairs_corrupt_only_the_earlier_occurrence():
    clean, corrupted, answers = task_pairs(41, seed=5)
    last = clean[:, -1:]
    earlier = clean[:, :-1] == last
    assert bool((earlier.sum(1) == 1).all())  # the trigger occurs exactly once before
    where = earlier.int().argmax(1)
    assert torch.equal(answers, clean[torch.arange(41), where + 1])
    changed = clean != corrupted
    assert torch.equal(changed[:, :-1], earlier)  # only there, and always there
    assert not bool((corrupted[:, :-1] == last).any())  # the trigger is gone from the past


def _eager(model) -> transformers.GPT2LMHeadModel:
    """The same weights in transformers' own eager GPT-2 (the reference)."""
    config = transformers.GPT2Config.from_dict(model.model.config.to_dict())
    config._attn_implementation = "eager"
    ref = transformers.GPT2LMHeadModel(config).eval()
    ref.load_state_dict(model.model.state_dict())
    return ref.double()


@torch.no_grad()
def _patched_logprob(ref, clean, corrupted, answers, senders, receivers) -> tuple[float, float]:
    """Every edge 0.p -> 1.i<k> for p in senders, i in receivers patched at once, written with
    hooks on the eager model: (clean, patched) mean log p(answer) at the last position."""
    e, d = ref.config.n_embd, ref.config.n_embd // ref.config.n_head
    blocks = ref.transformer.h
    z, stream = {}, {}
    hooks = [
        blocks[0].attn.c_proj.register_forward_pre_hook(lambda m, a: z.__setitem__("z", a[0])),
        blocks[1].register_forward_pre_hook(lambda m, a: stream.__setitem__("x", a[0])),
    ]
    with torch.no_grad():
        ref(input_ids=corrupted)
        z_corrupted = z["z"]
        clean_logits = ref(input_ids=clean).logits[:, -1]
        z_clean, x_clean = z["z"], stream["x"]
    for hook in hooks:
        hook.remove()
    shift = 0.0
    for p in senders:  # head p's write: its rows of Conv1D (in, out)
        w_o = blocks[0].attn.c_proj.weight[p * d : (p + 1) * d]
        shift = shift + (z_corrupted - z_clean)[..., p * d : (p + 1) * d] @ w_o
    with torch.no_grad():
        fused = blocks[1].attn.c_attn(blocks[1].ln_1(x_clean + shift))  # (batch, pos, 3 e)

    def splice(_module, _args, output):
        output = output.clone()
        for i in receivers:  # head i's keys
            cols = slice(e + i * d, e + (i + 1) * d)
            output[..., cols] = fused[..., cols]
        return output

    hook = blocks[1].attn.c_attn.register_forward_hook(splice)
    with torch.no_grad():
        patched_logits = ref(input_ids=clean).logits[:, -1]
    hook.remove()
    rows = torch.arange(len(answers))

    def read(logits):
        return float(logits.log_softmax(-1)[rows, answers].mean())

    return read(clean_logits), read(patched_logits)


@torch.no_grad()
def _k_composition(ref, p: int, i: int) -> float:
    """Elhage's K-composition of 0.p into 1.i, dense float64, LayerNorm scales folded."""
    e, h = ref.config.n_embd, ref.config.n_head
    d = e // h
    heads = []
    for block in ref.transformer.h:
        g = block.ln_1.weight.double()
        fused = block.attn.c_attn.weight.double().t()  # (3 e, in) = [q; k; v]
        q, k, v = (fused[n * e : (n + 1) * e].view(h, d, e) * g for n in range(3))
        o = block.attn.c_proj.weight.double().t().view(e, h, d)
        heads.append((q, k, v, o))
    _, _, v0, o0 = heads[0]
    q1, k1, _, _ = heads[1]
    ov = o0[:, p] @ v0[p]
    qk = q1[i].t() @ k1[i]
    norm = torch.linalg.matrix_norm
    return float(norm(qk @ ov) / (norm(qk) * norm(ov)))


def test_checkpoint_fields_equal_the_eager_reference():
    config = FormationRequest(heads=H, steps=5, every=5, seed=3)
    torch.manual_seed(3)
    tiny = TinyTransformer(config.run_config())
    with torch.no_grad():  # away from the init, so that heads attend somewhere and edges matter
        for parameter in tiny.parameters():
            parameter.normal_(0.0, 0.5)
    model = as_transformers(tiny)
    pairs = task_pairs(37, seed=11)
    point = measure(model, 7, pairs, samples=4, seed=2)
    ref = _eager(model)
    clean, corrupted, answers = pairs
    with torch.no_grad():
        logits = ref(input_ids=clean).logits[:, -1]
    assert point.step == 7
    assert point.loss == pytest.approx(
        float(torch.nn.functional.cross_entropy(logits, answers)), rel=1e-4
    )
    assert point.accuracy == pytest.approx(float((logits.argmax(-1) == answers).double().mean()))
    # the detectors' heads, from the eager model's own attention weights
    ids = repeated_random_tokens(torch.arange(16), 12, 32, seed=2)
    with torch.no_grad():
        weights = ref(input_ids=ids, output_attentions=True).attentions
    prev = weights[0].diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))
    ind = weights[1][:, :, 12:23, 1:12].diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2))
    assert point.previous_head == int(prev.argmax())
    assert point.previous_score == pytest.approx(float(prev.max()), abs=1e-5)
    assert point.induction_head == int(ind.argmax())
    assert point.induction_score == pytest.approx(float(ind.max()), abs=1e-5)
    p, i = point.previous_head, point.induction_head
    assert point.edge == f"0.{p}->1.{i}<k>"
    assert point.k_composition == pytest.approx(_k_composition(ref, p, i), rel=1e-5)
    assert 0.0 < point.k_baseline < 1.0
    clean_value, patched = _patched_logprob(ref, clean, corrupted, answers, [p], [i])
    assert point.clean_metric == pytest.approx(clean_value, abs=1e-4)
    assert abs(patched - clean_value) > 1e-3  # the check below can fail
    assert point.patching_effect == pytest.approx(patched - clean_value, abs=5e-5)
    _, whole = _patched_logprob(ref, clean, corrupted, answers, range(H), range(H))
    assert abs((whole - clean_value) - (patched - clean_value)) > 1e-3
    assert point.k_path_effect == pytest.approx(whole - clean_value, abs=5e-5)
    # every K edge of the model, four ways: exact and composition against the same references
    scored = k_edges(model, pairs, samples=2, seed=2)
    assert scored.edges == [f"0.{a}->1.{b}<k>" for a in range(H) for b in range(H)]
    assert max(scored.previous_scores) == pytest.approx(point.previous_score)
    assert max(scored.induction_scores) == pytest.approx(point.induction_score)
    for n, name in enumerate(scored.edges):
        a, b = int(name[2]), int(name[7])
        _, alone = _patched_logprob(ref, clean, corrupted, answers, [a], [b])
        assert scored.exact[n] == pytest.approx(alone - clean_value, abs=5e-5), name
        assert scored.composition[n] == pytest.approx(_k_composition(ref, a, b), rel=1e-5)
    assert len(scored.eap) == len(scored.eap_ig) == H * H
    assert scored.top("exact", 1)[0][1] == max(scored.exact, key=abs)


def test_training_loop_measures_at_every_checkpoint(tmp_path):
    config = FormationRequest(
        heads=H, steps=5, every=2, seed=1, batch_size=8, eval_size=13, composition_samples=2
    )
    seen = []
    run = train_and_measure(config, lambda *args: seen.append(args))
    # each checkpoint says when it is measured; while it is, what runs and how far it is
    assert [a[:3] for a in seen if not a[3]] == [(H, s, 5) for s in (2, 4, 5)]
    stages = [(step, stage.rsplit(" ", 1)[0]) for _, step, _, stage in seen if stage]
    for step in (2, 4, 5):
        assert (step, "composition") in stages and (step, "patching") in stages
    last = {what for step, what in stages if step == 5}
    assert {
        "K edges: eap",
        "K edges: eap-ig",
        "K edges: exact patching",
        "faithfulness: circuits",
    } <= last
    exact = [s for _, step, _, s in seen if s.startswith("K edges: exact patching")]
    assert exact[-1] == f"K edges: exact patching {H * H}/{H * H}"
    assert seen[-1] == (H, 5, 5, "")
    assert [c.step for c in run.checkpoints] == [2, 4, 5]
    assert (run.heads, run.seed, run.steps) == (H, 1, 5)
    # the model measured is the one the sweep trains: its own curve, run here again
    sweep = run_one(config.run_config())
    assert [p.step for p in sweep.curve] == [2, 4, 5]
    for c, p in zip(run.checkpoints, sweep.curve, strict=True):
        assert c.accuracy == pytest.approx(p.accuracy, abs=1e-12)
        assert c.loss == pytest.approx(p.loss, rel=1e-5)
    assert sweep.config.run_id in run.model
    assert run.k_edges is not None and len(run.k_edges.edges) == H * H  # at the last step
    curve = run.faithfulness  # the top EAP-IG circuits of the whole graph, at the last step
    assert curve is not None and curve.method == "eap-ig"
    assert curve.fractions[:3] == [0.01, 0.02, 0.05]
    assert curve.sizes[-1] == curve.edges and curve.faithfulness[-1] == pytest.approx(1.0)
    assert all(len(r) == 3 for r in curve.random)
    for c in run.checkpoints:
        assert 0 <= c.previous_head < H and 0 <= c.induction_head < H
        assert c.loss > 0 and 0.0 <= c.accuracy <= 1.0
    result = InductionFormation("induction", "logprob", [run])
    path = tmp_path / "formation.json"
    written = write_result(path, result)
    back = read_result(path, InductionFormation)
    assert back == result and back.to_dict() == {k: v for k, v in written.items() if k != "headlab"}
    figure = write_formation_figure(result, tmp_path / "formation.png")
    assert png_text_chunks(figure.read_bytes())  # headlab's marker


def test_result_refuses_a_broken_file():
    good = {
        "task": "induction",
        "metric": "logprob",
        "runs": [
            {
                "heads": 1,
                "seed": 0,
                "steps": 10,
                "model": "m",
                "checkpoints": [
                    {
                        "step": 5,
                        "loss": 1.0,
                        "accuracy": 0.5,
                        "previous_head": 0,
                        "previous_score": 0.9,
                        "induction_head": 0,
                        "induction_score": 0.8,
                        "k_composition": 0.3,
                        "k_baseline": 0.1,
                        "edge": "0.0->1.0<k>",
                        "patching_effect": -1.0,
                        "clean_metric": -0.5,
                        "corrupted_metric": -2.0,
                        "k_path_effect": -1.5,
                    }
                ],
                "k_edges": None,
                "faithfulness": None,
            }
        ],
    }
    assert InductionFormation.from_dict(json.loads(json.dumps(good))).to_dict() == good
    older = json.loads(json.dumps(good))
    del older["runs"][0]["checkpoints"][0]["k_path_effect"]  # files written before it existed
    assert InductionFormation.from_dict(older).runs[0].checkpoints[0].k_path_effect is None
    assert InductionFormation.from_dict(older).runs[0].k_edges is None
    with_edges = json.loads(json.dumps(good))
    with_edges["runs"][0]["k_edges"] = {
        "edges": ["0.0->1.0<k>"],
        "composition": [0.3],
        "eap": [-1.0],
        "eap_ig": [-0.9],
        "exact": [-1.1],
        "previous_scores": [0.9],
        "induction_scores": [0.5],
    }
    with_edges["runs"][0]["faithfulness"] = {
        "method": "eap-ig",
        "selection": "top",
        "metric": "logprob",
        "edges": 10,
        "fractions": [0.1, 1.0],
        "sizes": [1, 10],
        "faithfulness": [0.5, 1.0],
        "random": [[0.0, 0.1], [1.0, 1.0]],
        "cpr": 0.7,
        "cmd": 0.3,
        "random_cpr": [0.5, 0.55],
        "random_cmd": [0.5, 0.45],
    }
    assert InductionFormation.from_dict(with_edges).to_dict() == with_edges
    with_edges["runs"][0]["k_edges"]["eap"] = [1.0, 2.0]
    with pytest.raises(ValueError, match=r"k_edges\.eap"):
        InductionFormation.from_dict(with_edges)
    bad = json.loads(json.dumps(good))
    bad["runs"][0]["checkpoints"][0]["accuracy"] = 1.5
    with pytest.raises(ValueError, match=r"checkpoints\[0\]\.accuracy"):
        InductionFormation.from_dict(bad)
    bad = json.loads(json.dumps(good))
    bad["runs"][0]["checkpoints"] *= 2
    with pytest.raises(ValueError, match="increasing step order"):
        InductionFormation.from_dict(bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--heads", "3"], "--heads must divide d_model 64, got 3"),
        (["--every", "0"], "--every must be between 1 and 800, got 0"),
        (["--heads", ""], "--heads must name at least one head count"),
        (["--seed", "1,1"], "--seed must name distinct seeds, got [1, 1]"),
        (["--seed", "0,-2"], "--seed values must be >= 0, got -2"),
        (["--seed", "a"], "--seed takes comma-separated integers, got 'a'"),
    ],
)
def test_cli_bad_input_is_one_line(args, message, capsys):
    from headlab.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["formation", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_several_seeds_train_one_run_each(monkeypatch):
    """Each (head count, seed) is one ``train_and_measure`` run, head count first; every config
    is checked before any run."""
    trained = []

    def fake(config, progress=None):
        trained.append((config.heads, config.seed))
        return f"run {config.heads} {config.seed}"

    monkeypatch.setattr("headlab.experiments.induction_circuit.train_and_measure", fake)
    result = induction_formation([1, 8], steps=10, every=5, seed=[2, 0, 5])
    assert trained == [(1, 2), (1, 0), (1, 5), (8, 2), (8, 0), (8, 5)]
    assert result.runs == [f"run {h} {s}" for h, s in trained]
    assert induction_formation([1], steps=10, every=5, seed=3).runs == ["run 1 3"]
    trained.clear()
    with pytest.raises(ValueError, match="heads must divide d_model 64, got 3"):
        induction_formation([1, 3], steps=10, every=5, seed=[0, 1])
    with pytest.raises(ValueError, match=r"seed must name distinct seeds, got \[1, 1\]"):
        induction_formation([1], steps=10, seed=[1, 1])
    assert trained == []  # refused before any run
