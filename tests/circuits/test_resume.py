"""A run started at any layer from the cached clean stream gives the full run's logits (the
model's own forward, compared with transformers' output on the same model), a run stopped at a
block's site returns what that site holds (compared with torch hooks on transformers' own
modules), and the blocks skipped are restored."""

import torch
from hf_families import VOCAB, build

from headlab.circuits.resume import Runner
from headlab.models.hf import attach
from headlab.models.run_protocol import StopAt


def test_started_at_every_layer_equals_the_full_run():
    model = attach(build("gpt_neox"))
    ids = torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([2, 6])
    runner = Runner(model, ids, torch.ones_like(ids), positions)
    cache = runner.cache(ids)
    with torch.no_grad():
        expected = model.model(input_ids=ids).logits[:, positions]
    torch.testing.assert_close(cache.logits, expected)
    for start in range(len(runner.blocks) + 1):
        hidden = cache.resid[start].repeat(3, 1, 1)
        with torch.no_grad():
            logits = runner.forward(start, hidden, 3)
        torch.testing.assert_close(logits, expected.repeat(3, 1, 1), rtol=1e-5, atol=1e-5)


def test_stops_return_what_transformers_modules_see():
    model = attach(build("llama"))
    ids = torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(2))
    runner = Runner(model, ids, torch.ones_like(ids), torch.tensor([6]))
    layer = model.model.model.layers[1]
    seen = {}
    handles = [
        layer.register_forward_pre_hook(
            lambda m, a, k: seen.__setitem__("resid_in", a[0]), with_kwargs=True
        ),
        layer.register_forward_hook(
            lambda m, a, o: seen.__setitem__(
                "resid_out", o if isinstance(o, torch.Tensor) else o[0]
            )
        ),
        layer.mlp.register_forward_pre_hook(lambda m, a: seen.__setitem__("mlp_in", a[0])),
        layer.mlp.register_forward_hook(lambda m, a, o: seen.__setitem__("mlp_out", o)),
    ]
    try:
        with torch.no_grad():
            model.model(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
    cache = runner.cache(ids)
    for site in ("resid_in", "mlp_in", "mlp_out", "resid_out"):
        with torch.no_grad():
            got = runner.forward(1, cache.resid[1], 1, stop=StopAt(1, site))
        torch.testing.assert_close(got, seen[site], rtol=1e-5, atol=1e-6)
    assert all("forward" not in b.__dict__ for b in model.model.model.layers)
