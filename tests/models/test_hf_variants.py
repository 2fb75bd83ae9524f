"""Views, edits and head masks on the transformers route, against transformers' eager models.

A head view equals the eager model loaded with fewer heads (where that is the same weights: no
grouped K/V, no rotary); heads removed equal the eager model with a pre-hook zeroing their
columns of the output projection, and are refused for the layouts that cannot be cut; new W_Q
and W_K equal the eager model with the same rows edited by hand; the head-mask gradient equals
autograd through that hook. Interventions stay with the model (and the module) they were set on.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import torch
from hf_families import FAMILIES, model_class, padded, text

import headlab.attention.kernel as kernel
from headlab.attention.interventions import ablate
from headlab.heads.model_head_sums import model_head_sums
from headlab.models.head_mask import as_mask
from headlab.models.hf import attach, load_transformers
from headlab.models.interface import TokenBatch

#: Families whose projections are one nn.Linear per role: heads can be removed.
CUTTABLE = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "bert",
]
#: Why the others cannot: (family, words of the refusal).
UNCUT = [
    ("phi3", "qkv_proj makes 80 outputs"),
    ("gpt2", "c_attn is a Conv1D"),
    ("gpt_neox", "query_key_value makes 120 outputs"),
    ("olmo2", "q_norm.weight ((48,)) normalises over all heads"),
]


def outputs(model, ids, mask, hooks=()):
    """The eager model's output (logits or hidden states) with ``hooks`` (module, pre-hook)."""
    with contextlib.ExitStack() as stack:
        for module, hook in hooks:
            stack.callback(module.register_forward_pre_hook(hook).remove)
        out = model(input_ids=ids, attention_mask=mask)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def scale_heads(d: int, scale: torch.Tensor):
    """A pre-hook on an output projection: head h's input columns times scale[h]."""

    def hook(module, args):
        x = args[0]
        heads = x.shape[-1] // d
        x = (x.unflatten(-1, (heads, d)) * scale.to(x.dtype)[:, None]).flatten(-2)
        return (x, *args[1:])

    return hook


def masking_hooks(model, eager, heads):
    """Pre-hooks on ``eager``'s output projections that zero ``heads`` ({layer: [head]})."""
    layers = model.attention_layers()
    return [
        (eager.get_submodule(layers[i].output.path), scale_heads(layers[i].head_dim, mask))
        for i, mask in enumerate(as_mask(model, heads))
        if (mask == 0).any()
    ]


def removal(model) -> dict[int, list[int]]:
    """Two heads of layer 0 (one from each end), every head but one of the last layer."""
    last = model.num_layers - 1
    return {0: [0, model.heads_per_layer[0] - 1], last: list(range(1, model.heads_per_layer[last]))}


@pytest.mark.parametrize("name", CUTTABLE)
def test_removed_heads_equal_the_hook_reference(name, hf_loaded, hf_eager):
    model, eager = hf_loaded(name), hf_eager(name)
    heads = removal(model)
    pruned = model.without_heads(heads)
    assert pruned.heads_per_layer[0] == model.heads_per_layer[0] - 2
    assert pruned.heads_per_layer[-1] == 1
    assert pruned.parameter_count() < model.parameter_count()
    ids, mask = padded(6)
    with torch.no_grad():
        expected = outputs(eager, ids, mask, masking_hooks(model, eager, heads))
        got = pruned._outputs(ids, mask)
        again = model._outputs(ids, mask)  # the original is unchanged
        plain = outputs(eager, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again[real], plain[real], atol=1e-5, rtol=1e-5)


def test_removing_heads_of_uneven_groups_and_every_head(hf_loaded, hf_eager):
    """Llama, 6 query heads on 2 K/V heads: without head 0 the five kept heads do not split
    evenly over the two K/V heads, so each gets its own copy of its K/V rows (counted once);
    a layer without heads outputs its output projection's bias (none here: zero)."""
    model, eager = hf_loaded("llama"), hf_eager("llama")
    heads = {0: [0], 1: list(range(6))}
    pruned = model.without_heads(heads)
    assert pruned.heads_per_layer == [5, 0] and pruned.kv_heads_per_layer == [5, 0]
    d, e = 8, 48
    removed_layer_1 = 6 * d * e + 2 * 2 * d * e + 6 * d * e  # q, k, v, o of every head
    assert pruned.parameter_count() == model.parameter_count() - 2 * d * e - removed_layer_1
    ids, mask = padded(7)
    with torch.no_grad():
        expected = outputs(eager, ids, mask, masking_hooks(model, eager, heads))
        got = pruned._outputs(ids, mask)
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "why"), UNCUT)
def test_layouts_that_cannot_be_cut_are_refused_by_name(name, why, hf_loaded):
    with pytest.raises(ValueError, match=rf"family '{name}'.*{re.escape(why)}.*prune by masking"):
        hf_loaded(name).without_heads({0: [1]})


@pytest.mark.parametrize(("name", "heads"), [("gpt2", "n_head"), ("bert", "num_attention_heads")])
def test_a_head_view_equals_the_same_weights_loaded_with_one_head(name, heads, hf_dirs, hf_loaded):
    """Without grouped K/V heads or rotary positions, viewing h heads as one is loading the same
    weights with one head (one head of h * d_head, scaled by 1 / sqrt(h * d_head))."""
    model = hf_loaded(name)
    one = model_class(FAMILIES[name]).from_pretrained(
        hf_dirs[name], attn_implementation="eager", **{heads: 1}
    )
    ids, mask = padded(8)
    with torch.no_grad():
        expected = outputs(one.eval(), ids, mask)
        view = model.with_head_view(1)
        got = view._outputs(ids, mask)
        same = model.with_head_view(model.heads_per_layer[0])._outputs(ids, mask)
        plain = model._outputs(ids, mask)
    real = mask.bool()
    assert view.heads_per_layer == [1] * model.num_layers
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(same, plain)
    assert (got[real] - plain[real]).abs().max() > 1e-6  # the view changes something


@pytest.mark.parametrize(
    "name",
    [n for n in FAMILIES if n not in ("gpt2", "bert")],  # those two: the test above
)
def test_a_head_view_of_rotary_or_grouped_heads_runs_and_keeps_the_weights(name, hf_loaded):
    """Grouped K/V heads and rotary positions (and soft-cap, sinks, QK-norm, fused projections):
    each K/V group viewed as one head (one head where there is no grouping); statistics cannot
    stream through a view (they are per head)."""
    model = hf_loaded(name)
    heads, groups = model.heads_per_layer[0], model.kv_heads_per_layer[0]
    count = groups if groups < heads else 1
    view = model.with_head_view(count, [0])
    assert view.heads_per_layer == [count, *model.heads_per_layer[1:]]
    assert view.attention_layers()[1] is model.attention_layers()[1]  # shared, not copied
    shared = {id(p) for p in model.parameters()}
    assert all(id(p) in shared for p in view.parameters())
    ids, mask = padded(9)
    with torch.no_grad():
        got, plain = view._outputs(ids, mask), model._outputs(ids, mask)
    assert torch.isfinite(got).all() and (got - plain).abs().max() > 1e-6
    with pytest.raises(ValueError, match="statistics are per head"):
        model_head_sums(view, TokenBatch(ids, mask.bool(), []))
    with pytest.raises(ValueError, match=f"must divide the {heads} query heads of layer 0"):
        model.with_head_view(heads - 1)


def _layout(name, eager):
    """Layer 0's (weight holding W_Q, its rows, weight holding W_K, its rows), each weight seen
    as (out, in), read by hand from each family's code."""
    if name == "gpt2":  # Conv1D: weight (in, out), columns [q | k | v]
        w = eager.transformer.h[0].attn.c_attn.weight.T
        return w, torch.arange(30), w, torch.arange(30, 60)
    if name == "gpt_neox":  # rows per head: [q_h; k_h; v_h] of 10 each
        rows = torch.arange(120).view(4, 3, 10)
        w = eager.gpt_neox.layers[0].attention.query_key_value.weight
        return w, rows[:, 0].flatten(), w, rows[:, 1].flatten()
    if name == "phi3":  # rows [q of every head; k; v]
        w = eager.model.layers[0].self_attn.qkv_proj.weight
        return w, torch.arange(48), w, torch.arange(48, 64)
    if name == "bert":
        attention = eager.encoder.layer[0].attention.self
        return attention.query.weight, torch.arange(36), attention.key.weight, torch.arange(36)
    attention = eager.model.layers[0].self_attn
    return attention.q_proj.weight, torch.arange(48), attention.k_proj.weight, torch.arange(16)


@pytest.mark.parametrize(
    "name", ["llama", "mistral", "qwen2", "gemma2", "gpt_oss", "phi3", "gpt2", "gpt_neox", "bert"]
)
def test_query_key_weights_are_the_families_rows_and_can_be_replaced(name, hf_dirs, hf_loaded):
    model = hf_loaded(name)
    eager = model_class(FAMILIES[name]).from_pretrained(hf_dirs[name], attn_implementation="eager")
    holds_q, q_rows, holds_k, k_rows = _layout(name, eager)
    w_q, w_k = model.attention_layers()[0].query_key_weights()
    torch.testing.assert_close(w_q, holds_q[q_rows], atol=0, rtol=0)
    torch.testing.assert_close(w_k, holds_k[k_rows], atol=0, rtol=0)
    new_q, new_k = w_q * torch.linspace(0.5, 1.5, w_q.shape[0])[:, None], w_k.flip(0)
    edited = model.with_query_key_weights({0: (new_q, new_k)})
    with torch.no_grad():  # the same edit by hand
        holds_q[q_rows] = new_q
        holds_k[k_rows] = new_k
    ids, mask = padded(10)
    with torch.no_grad():
        expected = outputs(eager.eval(), ids, mask)
        got = edited._outputs(ids, mask)
        plain = model._outputs(ids, mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    assert (got[real] - plain[real]).abs().max() > 1e-6  # the edit changes something
    torch.testing.assert_close(model.attention_layers()[0].query_key_weights()[0], w_q)
    torch.testing.assert_close(edited.attention_layers()[0].query_key_weights()[0], new_q)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe", "gemma3_text", "olmo2"])
def test_query_key_weights_are_refused_behind_a_norm(name, hf_loaded):
    with pytest.raises(ValueError, match=rf"{name}.*queries are not a linear map"):
        hf_loaded(name).attention_layers()[0].query_key_weights()


@pytest.mark.parametrize(
    ("name", "recomputed"),
    [
        ("llama", False),
        ("gemma2", False),
        ("gemma2", True),
        ("gpt_oss", False),
        ("gpt_oss", True),
        ("gpt2", False),
        ("bert", False),
    ],
)
def test_the_head_mask_gradient_equals_autograd_through_the_hook(
    name, recomputed, hf_dirs, monkeypatch
):
    """Michel et al.'s xi: d objective / d head_mask on the transformers route equals autograd
    through a pre-hook that scales the output-projection columns of transformers' own model, in
    float64 (gpt-oss' experts run in float32 only). The reference runs transformers' SDPA where
    the family has it; Gemma 2 (soft-cap) and gpt-oss (sinks) have only eager attention, whose
    softmax is float32 even in a float64 model (seen: 5e-7 relative), hence their tolerance.
    Texts of one length: eager Gemma 2 in float64 turns a padded batch into NaN. ``recomputed``:
    headlab's attention takes the chunked path with the backward that recomputes each chunk's
    weights (the path of long texts), forced here at 12 tokens."""
    calls = []
    if recomputed:
        original = kernel.RecomputedAttention.apply
        monkeypatch.setattr(kernel, "MIN_RECOMPUTED", 1)
        monkeypatch.setattr(kernel, "CHUNK_ELEMENTS", 7)  # several chunks
        monkeypatch.setattr(
            kernel.RecomputedAttention, "apply", lambda *a: calls.append(1) or original(*a)
        )
    dtype = torch.float32 if name == "gpt_oss" else torch.float64
    eager = name in ("gemma2", "gpt_oss")
    model = load_transformers(hf_dirs[name], dtype=dtype)
    texts = [text(8, seed) for seed in range(4)]
    seed = torch.Generator().manual_seed(0)
    xi = [
        (0.5 + torch.rand(h, generator=seed, dtype=dtype)).requires_grad_()
        for h in model.heads_per_layer
    ]
    ours = torch.autograd.grad(model.objective(texts, xi, 12), xi)
    reference = load_transformers(hf_dirs[name], dtype=dtype)
    reference.model = (
        model_class(FAMILIES[name])
        .from_pretrained(
            hf_dirs[name], attn_implementation="eager" if eager else "sdpa", dtype=dtype
        )
        .eval()
    )
    xi_ref = [x.detach().clone().requires_grad_() for x in xi]
    hooks = [
        (reference.model.get_submodule(layer.output.path), scale_heads(layer.head_dim, x))
        for layer, x in zip(model.attention_layers(), xi_ref, strict=True)
    ]
    with contextlib.ExitStack() as stack:
        for module, hook in hooks:
            stack.callback(module.register_forward_pre_hook(hook).remove)
        theirs = torch.autograd.grad(reference.objective(texts, None, 12), xi_ref)
    tolerance = {"atol": 1e-7, "rtol": 1e-5} if eager else {"atol": 1e-12, "rtol": 1e-10}
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, **tolerance)
        assert b.abs().max() > 0
    assert bool(calls) == recomputed


def test_two_models_in_one_process_keep_their_own_interventions(hf_dirs):
    """Two loads of one checkpoint, each with a different head ablated at the same time; a
    view of the first; a second attach of the first's model (same layers, shared sites)."""
    first, second = load_transformers(hf_dirs["llama"]), load_transformers(hf_dirs["llama"])
    view = first.with_head_view(2, [1])
    ids, mask = padded(11)
    with torch.no_grad():
        plain = first._outputs(ids, mask)
        only_1 = first._outputs(ids, mask)
        with ablate(first.attention_layers()[0], [1]):
            only_1 = first._outputs(ids, mask)
        with ablate(second.attention_layers()[0], [4]):
            only_4 = second._outputs(ids, mask)
        with (
            ablate(first.attention_layers()[0], [1]),
            ablate(second.attention_layers()[0], [4]),
        ):
            both = first._outputs(ids, mask), second._outputs(ids, mask)
            view_sees = view.attention_layers()[1].sites
            again = attach(first.model)
            assert again.attention_layers()[0] is first.attention_layers()[0]
            assert again.attention_layers()[0].sites.hooks  # shared: the same module's
    assert not view_sees.hooks and view.attention_layers()[0] is first.attention_layers()[0]
    torch.testing.assert_close(both[0], only_1, atol=0, rtol=0)
    torch.testing.assert_close(both[1], only_4, atol=0, rtol=0)
    assert (only_1 - plain).abs().max() > 1e-4 and (only_4 - only_1).abs().max() > 1e-4
