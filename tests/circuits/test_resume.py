"""A run started at any layer from the cached clean stream gives the full run's logits (the
model's own forward, compared with transformers' output on the same model), and a hook's Stop
ends it early with its value."""

import torch
from hf_families import VOCAB, build

from headlab.circuits.resume import Runner, Stop, hooked
from headlab.models.hf import attach


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
    block = runner.blocks[0].module

    def hooks(stack):
        def stop(_m, _a, output):
            raise Stop("stopped")

        stack.enter_context(hooked(block, "post", stop))

    assert runner.forward(0, cache.resid[0], 1, hooks) == "stopped"
    assert "forward" not in block.__dict__  # the skipped blocks are restored
