"""Patching sets of edges: the empty set is the clean run, every edge the corrupted run, and a
set of one edge is exact path patching of that edge (itself checked against hooks on
transformers' eager models in test_path_patching.py); a family with a norm after W_O is
refused."""

import pytest
import torch
from test_attribution import _task
from test_path_patching import sharp

from headlab.circuits.circuit_patching import CircuitPatcher
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2", "gpt_neox"])
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


def test_post_norm_family_refused():
    clean, corrupted, metric = _task()
    patcher = Patcher(attach(sharp("gemma2")), clean, corrupted, metric)
    with pytest.raises(ValueError, match="'gemma2': a head's write is not its output through W_O"):
        CircuitPatcher(patcher)
