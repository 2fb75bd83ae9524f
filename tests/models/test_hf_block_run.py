"""The run protocol on the transformers route, family by family, against transformers itself:

- a whole run (``run_protocol.cache``) unembedded equals transformers' own logits, and a run
  started at any block from the cached stream gives them again;
- each block site holds what torch hooks on transformers' own block and MLP modules see (the
  block and the MLP read from the model's declarations: ``_no_split_modules``, ``mlp``);
- the declared parallel flag equals what the model does: the MLP's input (read by a torch hook)
  moves with the attention's output in a sequential block and not in a parallel one;
- a hybrid and a block without a declared MLP are refused in one line naming what is missing.
"""

from __future__ import annotations

import pytest
import torch
from hf_families import VOCAB, build

from headlab.attention.interventions import intervene
from headlab.models.hf import attach
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import RunnableModel, StopAt, cache

FAMILIES = ["llama", "gpt2", "gpt_neox", "gemma2", "qwen3_moe", "phi3", "olmo2", "gpt_oss"]


def _batch(length: int = 9) -> TokenBatch:
    ids = torch.randint(3, VOCAB, (2, length), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, -2:] = False  # padding on the right
    return TokenBatch(ids, mask, [])


def _seen_by_hooks(model, batch):
    """Per block: what transformers' block and MLP modules receive and return."""
    seen: dict[tuple[int, str], torch.Tensor] = {}
    handles = []

    def first(x):
        return x if isinstance(x, torch.Tensor) else x[0]

    def keep(i, site, pick):
        return lambda *args: seen.__setitem__((i, site), first(pick(*args)))

    for i in range(len(model.blocks())):
        module = model.model.get_submodule(model._block_parts()[1][i].path)
        handles += [
            module.register_forward_pre_hook(
                keep(i, "resid_in", lambda m, a, k: a or [k["hidden_states"]]), with_kwargs=True),
            module.register_forward_hook(keep(i, "resid_out", lambda m, a, o: o)),
            module.mlp.register_forward_pre_hook(keep(i, "mlp_in", lambda m, a: a)),
            module.mlp.register_forward_hook(keep(i, "mlp_out", lambda m, a, o: o)),
        ]  # fmt: skip
    try:
        with torch.no_grad():
            logits = model.model(input_ids=batch.input_ids,
                                 attention_mask=batch.attention_mask.long()).logits  # fmt: skip
    finally:
        for handle in handles:
            handle.remove()
    return seen, logits


@pytest.mark.parametrize("family", FAMILIES)
def test_the_protocol_equals_transformers(family):
    model = attach(build(family))
    assert isinstance(model, RunnableModel)
    assert [s.name for s in model.streams()] == ["decoder"]
    batch = _batch()
    seen, logits = _seen_by_hooks(model, batch)
    kept = cache(model, batch)
    with torch.no_grad():
        torch.testing.assert_close(model.unembed(kept.final), logits, rtol=1e-5, atol=1e-5)
    blocks = model.blocks()
    for i in range(len(blocks)):
        torch.testing.assert_close(kept.resid[i], seen[(i, "resid_in")])
        torch.testing.assert_close(kept.mlp[i], seen[(i, "mlp_out")])
        for site in ("resid_in", "mlp_in", "mlp_out", "resid_out"):
            with torch.no_grad():
                got = model.run_blocks(batch, start=i, hidden=kept.resid[i], stop=StopAt(i, site))
            torch.testing.assert_close(got, seen[(i, site)], rtol=1e-5, atol=1e-5)
    for start in range(len(blocks) + 1):
        with torch.no_grad():
            states = model.run_blocks(batch, start=start, hidden=kept.resid[start].repeat(2, 1, 1),
                                      copies=2)  # fmt: skip
            torch.testing.assert_close(model.unembed(states), logits.repeat(2, 1, 1), rtol=1e-5,
                                       atol=1e-5)  # fmt: skip
    assert all("forward" not in vars(p.module) for p in model._block_parts()[1])


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "phi3"])
def test_the_declared_parallel_flag_is_what_the_model_does(family):
    model = attach(build(family))
    block = model.blocks()[1]
    mlp = model.model.get_submodule(model._block_parts()[1][1].path).mlp
    batch = _batch()
    inputs = []
    handle = mlp.register_forward_pre_hook(lambda m, a: inputs.append(a[0]))
    try:
        with torch.no_grad():
            model.run_blocks(batch)
            with intervene(block.attention, "head_outputs", lambda t: 3.0 * t + 1.0):
                model.run_blocks(batch)
    finally:
        handle.remove()
    moved = not torch.allclose(inputs[0], inputs[1])
    assert moved is not block.parallel


def test_a_hybrid_and_an_encoder_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"blocks in .* with attention \(a hybrid\)") as error:
        attach(build("jamba")).blocks()
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="none of the MLP attributes") as error:
        attach(build("bert")).blocks()
    assert "\n" not in str(error.value)
