"""The norms of a block as the run protocol names them (``Block.norms``), each with its "scale"
site, on the transformers route, against each family's norm written out here (its weight, its
``1 + weight`` for Gemma, its bias, its epsilon, centred or not):

- the site holds one over each row's scale, 1/sqrt(mean(C(x)^2) + eps), of the input a torch
  hook on the module sees;
- with every copy held at the last copy's scales (``circuits.frozen_norms``), a norm's output on
  another copy is g * C(x) * (1/s of the last copy) + b, and the last copy's is the norm's own
  (up to the float32 inside some families' norms: the held norm computes in the model's dtype);
- the roles name the norm in front of the attention (the layer's own ``input_norm``) and those
  inside it (QK-norm), and the rest (an encoder-decoder's: tests/kinds/test_kind_norm_sites.py);
- a module named like a norm that is not one is refused in one line.
"""

from __future__ import annotations

import pytest
import torch
from hf_families import VOCAB, build
from torch import nn

from headlab.attention.interventions import intervene
from headlab.circuits.frozen_norms import frozen_norms
from headlab.models.hf import attach
from headlab.models.hf.norm_sites import HFNorm
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import StopAt

FAMILIES = ["llama", "gpt2", "gemma2", "qwen3", "olmo2"]
#: Llama's, Gemma's, Qwen's and OLMo's RMSNorms compute in float32 whatever the model's dtype:
#: the scales read from their output carry float32's rounding.
FLOAT32_INSIDE = 1e-5


def _reference(module: nn.Module, x: torch.Tensor):
    """(1/s (..., 1), g, b, centred) of the family's norm, from its definition."""
    centred = isinstance(module, nn.LayerNorm)
    eps = getattr(module, "eps", None)
    eps = getattr(module, "variance_epsilon", eps)
    c = x - x.mean(-1, keepdim=True) if centred else x
    inv_s = 1 / (c.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    g = module.weight + 1 if type(module).__name__.startswith("Gemma") else module.weight
    b = module.bias if getattr(module, "bias", None) is not None else torch.zeros_like(g)
    return inv_s, g.detach(), b.detach(), centred


def _inputs(model):
    """Per norm module, the inputs and outputs torch hooks see in one run (the norms' forms
    read first: their reading calls the modules)."""
    seen = {}
    handles = []
    for block in model.blocks():
        for norm in block.norms:
            norm.centres()

            def keep(m, args, output, norm=norm):
                seen.setdefault(id(norm), []).append((args[0], output))

            handles.append(norm.module.register_forward_hook(keep))
    return seen, handles


def _batch():
    ids = torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(2))
    return TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), [])


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return attach(build(request.param).double())


def test_the_scale_site_holds_one_over_each_rows_scale(model):
    batch = _batch()
    recorded: dict[int, list] = {}
    seen, handles = _inputs(model)

    def interventions(stack):
        for block in model.blocks():
            for norm in block.norms:
                keep = lambda t, n=norm: recorded.setdefault(id(n), []).append(t)  # noqa: E731
                stack.enter_context(intervene(norm, "scale", keep))

    try:
        with torch.no_grad():
            model.run_blocks(batch, interventions=interventions)
    finally:
        for handle in handles:
            handle.remove()
    norms = [n for b in model.blocks() for n in b.norms]
    assert norms and all(id(n) in recorded for n in norms)
    for norm in norms:
        for scale, (x, _) in zip(recorded[id(norm)], seen[id(norm)], strict=True):
            inv_s, *_ = _reference(norm.module, x)
            torch.testing.assert_close(scale, inv_s, rtol=FLOAT32_INSIDE, atol=0)


def test_copies_held_at_the_last_copys_scales(model):
    batch = _batch()
    with torch.no_grad():
        real = model.run_blocks(batch, stop=StopAt(0, "resid_in"))
        other = real * torch.linspace(0.3, 2.9, real.shape[-1], dtype=real.dtype) + 0.7
    hidden = torch.cat([other, real])
    norms = [n for b in model.blocks() for n in b.norms]
    seen, handles = _inputs(model)
    try:
        with torch.no_grad():
            held = model.run_blocks(
                batch,
                start=0,
                hidden=hidden,
                copies=2,
                interventions=lambda stack: stack.enter_context(frozen_norms(norms, 2)),
            )
            alone = model.run_blocks(batch, start=0, hidden=real)
    finally:
        for handle in handles:
            handle.remove()
    # the held norms compute in the model's dtype, the family's own in float32 for some
    torch.testing.assert_close(held[2:], alone, rtol=1e-4, atol=1e-5)
    for norm in norms:
        x, y = seen[id(norm)][0]
        half = x.shape[0] // 2
        with torch.no_grad():
            own = norm.module(x[half:])
        torch.testing.assert_close(y[half:], own, rtol=FLOAT32_INSIDE, atol=1e-7)
        inv_s, g, b, centred = _reference(norm.module, x[half:])
        c = x[:half] - x[:half].mean(-1, keepdim=True) if centred else x[:half]
        torch.testing.assert_close(y[:half], c * g * inv_s + b, rtol=FLOAT32_INSIDE, atol=1e-6)


def test_roles_name_the_norm_in_front_and_those_inside(model):
    for block in model.blocks():
        front = [n for n in block.norms if n.role == "attention_in"]
        layer_norm = block.attention.input_norm  # OLMo 2: none (its norms follow the layer)
        assert len(front) == (layer_norm is not None)
        if front:
            assert front[0].module is layer_norm.module
        inside = {id(m) for m in block.attention.module.modules()}
        for norm in block.norms:
            assert (norm.role == "qk") == (id(norm.module) in inside)


class ScaleNorm(nn.Module):
    """Named like a norm, with a 1-D weight, but only scales its input."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, x):
        return x * self.weight


def test_a_module_that_is_no_norm_is_refused():
    with pytest.raises(ValueError, match=r"ScaleNorm.* is not"):
        HFNorm("block", ScaleNorm(7)).centres()
