"""The run protocol on the transformers route, family by family, against transformers itself:

- a whole run (``run_protocol.cache``) unembedded equals transformers' own logits, and a run
  started at any block from the cached stream gives them again;
- each block site holds what torch hooks on transformers' own block and MLP modules see (the
  block and the MLP read from the model's declarations: ``_no_split_modules``, ``mlp``);
- the declared parallel flag equals what the model does: the MLP's input (read by a torch hook)
  moves with the attention's output in a sequential block and not in a parallel one;
- an encoder whose MLP is two modules (BERT) has its sites where hooks on them see them;
- a hybrid and a block without a declared MLP are refused in one line naming what is missing.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from hf_families import VOCAB, build

from headlab.attention.interventions import intervene
from headlab.models.hf import attach, block_parts
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
                keep(i, "resid_in", lambda m, a, k: a or [k["hidden_states"]]), with_kwargs=True
            ),
            module.register_forward_hook(keep(i, "resid_out", lambda m, a, o: o)),
            module.mlp.register_forward_pre_hook(keep(i, "mlp_in", lambda m, a: a)),
            module.mlp.register_forward_hook(keep(i, "mlp_out", lambda m, a, o: o)),
        ]
    try:
        with torch.no_grad():
            logits = model.model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask.long()
            ).logits
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
            states = model.run_blocks(
                batch, start=start, hidden=kept.resid[start].repeat(2, 1, 1), copies=2
            )
            torch.testing.assert_close(
                model.unembed(states), logits.repeat(2, 1, 1), rtol=1e-5, atol=1e-5
            )
    assert all("forward" not in vars(p.module) for p in model._block_parts()[1])


def _parallel_family(name: str):
    """Tiny random models of the families parallel by their code alone (no config switch)."""
    torch.manual_seed(0)
    sizes = {"vocab_size": VOCAB}
    if name == "phi":
        config = transformers.PhiConfig(
            hidden_size=32,
            num_attention_heads=4,
            num_hidden_layers=2,
            intermediate_size=37,
            **sizes,
        )
        return transformers.PhiForCausalLM(config).eval()
    config = transformers.GPTJConfig(n_embd=32, n_head=4, n_layer=2, rotary_dim=4, **sizes)
    return transformers.GPTJForCausalLM(config).eval()


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "phi3", "phi", "gptj"])
def test_the_declared_parallel_flag_is_what_the_model_does(family):
    model = attach(_parallel_family(family) if family in ("phi", "gptj") else build(family))
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


def test_a_hybrid_and_a_block_without_a_declared_mlp_are_refused_in_one_line(monkeypatch):
    with pytest.raises(ValueError, match=r"blocks in .* with attention \(a hybrid\)") as error:
        attach(build("jamba")).blocks()
    assert "\n" not in str(error.value)
    monkeypatch.setattr(block_parts, "MLP_ATTRIBUTES", ())
    with pytest.raises(ValueError, match=r"block LlamaDecoderLayer has none of the MLP") as error:
        attach(build("llama")).blocks()
    assert "\n" not in str(error.value)


def test_an_encoder_whose_mlp_is_two_modules():
    """BERT's MLP is ``intermediate`` then ``output.dense`` (residual add and norm after): its
    sites are what hooks on those modules see, and a whole run is BERT's own output."""
    model = attach(build("bert"))
    assert [s.name for s in model.streams()] == ["encoder"]
    batch = _batch()
    layer = model.model.encoder.layer[1]
    seen = {}
    handles = [
        layer.register_forward_pre_hook(
            lambda m, a, k: seen.__setitem__("resid_in", a[0] if a else k["hidden_states"]),
            with_kwargs=True,
        ),
        layer.intermediate.register_forward_pre_hook(lambda m, a: seen.__setitem__("mlp_in", a[0])),
        layer.output.dense.register_forward_hook(lambda m, a, o: seen.__setitem__("mlp_out", o)),
        layer.register_forward_hook(
            lambda m, a, o: seen.__setitem__(
                "resid_out", o if isinstance(o, torch.Tensor) else o[0]
            )
        ),
    ]
    try:
        with torch.no_grad():
            want = model.model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask.long()
            ).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()
    kept = cache(model, batch)
    torch.testing.assert_close(kept.final, want, rtol=1e-5, atol=1e-5)
    for site in ("resid_in", "mlp_in", "mlp_out", "resid_out"):
        with torch.no_grad():
            got = model.run_blocks(batch, start=1, hidden=kept.resid[1], stop=StopAt(1, site))
        torch.testing.assert_close(got, seen[site], rtol=1e-5, atol=1e-5)


def test_a_variant_has_its_own_block_sites():
    """A variant (heads removed from block 0) has its own view of block 0, which shares the
    original's MLP module but not its sites: an intervention on one model's block 0 leaves the
    other's run as it was (block 1, unchanged, is one module and one set of sites for both, as
    its attention is)."""
    model = attach(build("llama"))
    variant = model.without_heads({0: [1]})
    batch = _batch()
    with torch.no_grad():
        before = variant.run_blocks(batch)
        assert variant.blocks()[1].sites is model.blocks()[1].sites
        with intervene(model.blocks()[0], "mlp_out", lambda t: 0 * t):
            assert torch.equal(variant.run_blocks(batch), before)
            changed = model.run_blocks(batch)
        with intervene(variant.blocks()[0], "mlp_out", lambda t: 0 * t):
            assert not torch.allclose(variant.run_blocks(batch), before)
        assert not torch.allclose(changed, model.run_blocks(batch))
