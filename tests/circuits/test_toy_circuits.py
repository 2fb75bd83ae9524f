"""Path patching, EAP and circuit patching on the toy family (tests/toy_family.py), which reaches
the circuits through the run protocol alone, against a reference written here: the toy's
forward by hand (per-head projections from a stream each receiver may have of its own), with no
headlab code in it. Sequential and parallel MLPs, grouped K/V heads (the K/V group as
receiver), float64.

Path patching: receiver v's input is the clean stream plus sender u's corrupted write minus its
clean write, everything else clean, everything after v recomputed. EAP: that write difference
dotted with the metric's gradient through v alone (a zero of v's own added to its input, so the
gradient at it flows through v and everything after v)."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.attention.interventions import intervene, record
from headlab.circuits.attribution import edge_attribution
from headlab.circuits.blocks import graph_of
from headlab.circuits.circuit_patching import CircuitPatcher
from headlab.circuits.metrics import logit_difference
from headlab.circuits.patching import Patcher, path_patching
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import StopAt, cache
from toy_family import D, H, Toy

LENGTH, BATCH = 7, 3


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one thread (a pool of them only waits for each other on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _toy(parallel: bool, kv_heads: int = H) -> Toy:
    toy = Toy.build(seed=3, mlp=True, parallel=parallel, kv_heads=kv_heads)
    for module in (toy.embed, *toy.layers, *toy.mlps):
        module.double()
    with torch.no_grad():  # larger weights: heads and MLPs that matter
        for layer in toy.layers:
            for lin in (layer.q, layer.k):
                lin.weight.mul_(2.0)
    return toy


def _task():
    generator = torch.Generator().manual_seed(5)
    clean = torch.randint(0, 29, (BATCH, LENGTH), generator=generator)
    corrupted = clean.clone()
    corrupted[:, 1:4] = torch.randint(0, 29, (BATCH, 3), generator=generator)
    position = torch.tensor([LENGTH - 1, LENGTH - 2, LENGTH - 1])
    answer, wrong = torch.tensor([3, 7, 11]), torch.tensor([5, 2, 13])
    return (
        clean,
        corrupted,
        logit_difference(position, answer, wrong, LENGTH),
        (position, answer, wrong),
    )


def _by_hand(toy: Toy, ids, extra=None):
    """The toy's forward written out: logits (batch, pos, vocab) and per layer the stream in,
    the head outputs (batch, head, pos, d_head), the MLP's input and output. ``extra``: (layer,
    "q"/"k"/"v", head) or (layer, "mlp") or ("logits",) -> a tensor added to that receiver's
    input alone."""
    extra = extra or {}
    x = toy.embed.weight[ids]
    rec = {"resid": [], "heads": [], "mlp_in": [], "mlp": []}
    causal = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
    for layer, (att, mlp) in enumerate(zip(toy.layers, toy.mlps, strict=True)):
        rec["resid"].append(x)

        def heads_of(lin, site, x=x, layer=layer):
            count = lin.weight.shape[0] // D  # query heads, or K/V heads (groups)
            found = torch.stack(
                [
                    (x + extra.get((layer, site, h), 0)) @ lin.weight[h * D : (h + 1) * D].T
                    for h in range(count)
                ],
                1,
            )
            return found.repeat_interleave(H // count, dim=1)  # each group to its query heads

        q, k, v = heads_of(att.q, "q"), heads_of(att.k, "k"), heads_of(att.v, "v")
        scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~causal, -math.inf)
        heads = scores.softmax(-1) @ v  # (batch, head, pos, d_head)
        rec["heads"].append(heads)
        out = sum(heads[:, h] @ att.o.weight[:, h * D : (h + 1) * D].T for h in range(H))
        mid = x + out
        mlp_in = (x if toy.parallel else mid) + extra.get((layer, "mlp"), 0)
        rec["mlp_in"].append(mlp_in)
        m = mlp(mlp_in)
        rec["mlp"].append(m)
        x = mid + m
    rec["resid"].append(x)
    return (x + extra.get(("logits",), 0)) @ toy.embed.weight.T, rec


def _metric(logits, truth) -> torch.Tensor:
    position, answer, wrong = truth
    rows = torch.arange(BATCH)
    at = logits[rows, position]
    return (at[rows, answer] - at[rows, wrong]).mean()


def _write(toy: Toy, rec, name: str):
    if name == "embed":
        return rec["resid"][0]
    if name.startswith("mlp."):
        return rec["mlp"][int(name[4:])]
    layer, head = (int(p) for p in name.split("."))
    w_o = toy.layers[layer].o.weight[:, head * D : (head + 1) * D]
    return rec["heads"][layer][:, head] @ w_o.T


def _receiver_key(graph, edge):
    if edge.receiver == "logits":
        return ("logits",)
    node = graph.node(edge.receiver)
    if node.kind == "mlp":
        return (node.layer, "mlp")
    return (node.layer, edge.input, node.index)


@pytest.mark.parametrize(("parallel", "kv_heads"), [(False, H), (True, 2)])
def test_path_patching_and_eap_equal_the_toy_by_hand(parallel, kv_heads):
    toy = _toy(parallel, kv_heads)
    clean, corrupted, metric, truth = _task()
    graph = graph_of(toy)
    assert graph.layers[0].parallel is parallel
    assert graph.layers[0].grouped is (kv_heads < H)
    names = [e.name for e in graph.edges]
    patched = path_patching(toy, clean, corrupted, metric, names)
    eap = edge_attribution(toy, clean, corrupted, metric, method="eap", edges=names)
    with torch.no_grad():
        clean_logits, clean_rec = _by_hand(toy, clean)
        _, corrupted_rec = _by_hand(toy, corrupted)
    base = _metric(clean_logits, truth)
    assert patched.clean_metric == pytest.approx(float(base), abs=1e-9)
    keys = {_receiver_key(graph, graph.edge(n)) for n in names}
    zeros = {
        k: torch.zeros(BATCH, LENGTH, 14, dtype=torch.float64, requires_grad=True) for k in keys
    }
    value = _metric(_by_hand(toy, clean, zeros)[0], truth)
    grads = dict(zip(keys, torch.autograd.grad(value, list(zeros.values())), strict=True))
    want_patch, want_eap = [], []
    for name in names:
        edge = graph.edge(name)
        key = _receiver_key(graph, edge)
        with torch.no_grad():
            delta = _write(toy, corrupted_rec, edge.sender) - _write(toy, clean_rec, edge.sender)
            want_patch.append(float(_metric(_by_hand(toy, clean, {key: delta})[0], truth) - base))
        want_eap.append(float((delta * grads[key]).sum()))
    want_patch, want_eap = torch.tensor(want_patch), torch.tensor(want_eap)
    assert float(want_patch.abs().max()) > 1e-2  # edges that matter: the check can fail
    torch.testing.assert_close(torch.tensor(patched.scores), want_patch, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(torch.tensor(eap.scores), want_eap, rtol=1e-7, atol=1e-9)


def test_circuit_patching_on_the_toy_ends_at_clean_and_corrupted():
    toy = _toy(False)
    clean, corrupted, metric, _ = _task()
    patcher = Patcher(toy, clean, corrupted, metric)
    every = {e.name for e in patcher.graph.edges}
    one = next(iter(sorted(every)))
    values = CircuitPatcher(patcher).metric([set(), every, {one}])
    assert float(values[0]) == pytest.approx(patcher.clean_value, abs=1e-9)
    assert float(values[1]) == pytest.approx(patcher.corrupted_value, abs=1e-9)
    single = patcher.effects([one])[0] + patcher.clean_value
    assert float(values[2]) == pytest.approx(float(single), abs=1e-9)


def test_one_intervention_reaches_every_site_of_the_toy():
    """Residual, MLP and head sites through one ``intervene``; a run from a block with the
    cached stream and a run stopped at a site give what the whole run had there."""
    toy = _toy(False)
    clean, _, _, _ = _task()
    batch = TokenBatch(clean, torch.ones_like(clean, dtype=torch.bool), [])
    _, rec = _by_hand(toy, clean)
    kept = cache(toy, batch)
    for layer in range(2):
        torch.testing.assert_close(kept.resid[layer], rec["resid"][layer])
        torch.testing.assert_close(kept.head_outputs[layer], rec["heads"][layer])
        torch.testing.assert_close(kept.mlp[layer], rec["mlp"][layer])
    block = toy.blocks()[1]
    with torch.no_grad():
        got = toy.run_blocks(batch, start=1, hidden=kept.resid[1], stop=StopAt(1, "mlp_in"))
    torch.testing.assert_close(got, rec["mlp_in"][1])
    with (
        torch.no_grad(),
        intervene(block, "mlp_out", lambda t: torch.zeros_like(t)),
        record(block, ["resid_out"]) as seen,
    ):
        toy.run_blocks(batch)
    mid = rec["resid"][2] - rec["mlp"][1]  # the stream leaving block 1 without its MLP
    torch.testing.assert_close(seen["resid_out"], mid)
    with (
        pytest.raises(ValueError, match="site must be one of resid_in"),
        intervene(block, "q", lambda t: t),
    ):
        pass
