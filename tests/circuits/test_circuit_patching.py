"""Patching sets of edges: the empty set is the clean run, every edge the corrupted run, and a
set of one edge is exact path patching of that edge (itself checked against hooks on
transformers' eager models in test_path_patching.py), on every family, Gemma 2 (norms after W_O
and the MLP, soft-capping, sliding window) included; on Gemma 2, where writes do not add up, sets
of several heads of one layer into one receiver against hooks on its eager model."""

import pytest
import torch
from hf_families import VOCAB
from test_attribution import _task
from test_path_patching import Reference, _logit_diff, sharp

from headlab.circuits.circuit_patching import CircuitPatcher
from headlab.circuits.metrics import logit_difference
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2", "gpt_neox", "gemma2"])
def test_extremes_and_single_edges(family):
    clean, corrupted, metric = _task()
    patcher = Patcher(attach(sharp(family)), clean, corrupted, metric)
    circuits = CircuitPatcher(patcher)
    names = [e.name for e in patcher.graph.edges]
    sample = names[::7]
    values = circuits.metric([set(), set(names)] + [{n} for n in sample])
    assert float(values[0]) == pytest.approx(patcher.clean_value, abs=1e-5)
    assert float(values[1]) == pytest.approx(patcher.corrupted_value, abs=1e-5)
    single = patcher.effects(sample)
    scale = float(single.abs().max())
    assert scale > 1e-2
    torch.testing.assert_close(values[2:] - patcher.clean_value, single, rtol=0, atol=1e-5 * scale)


class _LayerSet(Reference):
    """Hooks on the eager model, the write of several heads of one layer taken together
    (sender "L.H1+H2"): post-norm(W_O(clean outputs with those heads corrupted)) minus the
    same of the clean outputs."""

    def write(self, sender):
        if "+" not in sender:
            return super().write(sender)
        layer_text, heads_text = sender.split(".")
        layer, heads = int(layer_text), [int(h) for h in heads_text.split("+")]
        clean_in = self.clean["o_in"][layer]
        mixed = clean_in.clone()
        for head in heads:
            cols = slice(head * self.d_head, (head + 1) * self.d_head)
            mixed[..., cols] = self.corrupted["o_in"][layer][..., cols]
        o, post = self.part(layer, self.parts["o"]), self._post(layer, "post_attn")
        return post(o(mixed)) - post(o(clean_in))


def test_gemma2_sets_of_one_layers_heads_against_hooks_on_eager():
    generator = torch.Generator().manual_seed(5)
    batch, length = 3, 9
    clean = torch.randint(3, VOCAB, (batch, length), generator=generator)
    corrupted = clean.clone()
    corrupted[:, :5] = torch.randint(3, VOCAB, (batch, 5), generator=generator)
    position = torch.tensor([8, 6, 7])
    answer = torch.randint(3, VOCAB, (batch,), generator=generator)
    wrong = torch.randint(3, VOCAB, (batch,), generator=generator)
    metric = logit_difference(position, answer, wrong, length)
    reference = _LayerSet("gemma2", clean, corrupted)
    patcher = Patcher(attach(sharp("gemma2")), clean, corrupted, metric)
    circuits = CircuitPatcher(patcher)
    assert not circuits.linear  # the norm after W_O: writes do not add up
    clean_value = _logit_diff(reference.clean["logits"], position, answer, wrong)
    heads = patcher.graph.layers[0].num_heads
    cases = [("1.g0", "k"), ("1.1", "q"), ("mlp.1", "in"), ("logits", "in")]
    sets, expected, summed = [], [], []
    for receiver, input_ in cases:
        suffix = f"{receiver}<{input_}>" if input_ in ("q", "k", "v") else receiver
        edges = {f"0.{h}->{suffix}" for h in range(heads)}
        sets.append(edges)
        together = "0." + "+".join(str(h) for h in range(heads))
        with torch.no_grad():
            logits = reference.patched_logits(together, receiver, input_)
            summed.append(sum(reference.write(f"0.{h}") for h in range(heads)))
        expected.append(_logit_diff(logits, position, answer, wrong) - clean_value)
    got = circuits.metric(sets) - patcher.clean_value
    expected = torch.tensor(expected, dtype=torch.float64)
    scale = float(expected.abs().max())
    assert scale > 1e-3
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4 * scale + 2e-6)
    with torch.no_grad():
        together = reference.write("0." + "+".join(str(h) for h in range(heads)))
    assert float((summed[0] - together).abs().max()) > 1e-3  # the sum of single writes differs
