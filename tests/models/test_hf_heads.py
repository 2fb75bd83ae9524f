"""Every per-head analysis on the transformers route against transformers' own eager attention.

For each tiny family (``hf_families``) on a right-padded batch: the streamed statistics equal the
same statistics computed from eager ``output_attentions`` (GPT-2's function never hears the flag:
its eager model computes the weights itself), the detectors equal those of the eager weights, an
ablation equals a forward pre-hook on the eager model's output projection that zeroes the
ablated heads' input columns, and generation with an ablation equals eager generation with that
hook, step by step. The output projection is found by headlab (``HFAttentionLayer.output``); the
reference reads it at the same path in the eager model and calls the module itself.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from hf_families import FAMILIES, VOCAB, padded, text

from headlab.attention.functional import entropy
from headlab.attention.interventions import ablate, record
from headlab.heads.detectors import DETECTORS, detect_heads, detector_scores, repeated_random_tokens
from headlab.heads.model_head_sums import model_head_sums
from headlab.models.interface import TokenBatch

DECODERS = [name for name, family in FAMILIES.items() if family.causal]


def batch_of(ids: torch.Tensor, mask: torch.Tensor) -> TokenBatch:
    return TokenBatch(ids, mask.bool(), [[] for _ in range(ids.shape[0])])


def eager_run(eager, ids, mask, hooks=()):
    """(the eager model's output (logits or hidden states), its weights per layer), with
    ``hooks`` ((module, pre-hook)) in place."""
    with contextlib.ExitStack() as stack:
        for module, hook in hooks:
            stack.callback(module.register_forward_pre_hook(hook).remove)
        with torch.no_grad():
            out = eager(input_ids=ids, attention_mask=mask, output_attentions=True)
    result = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return result, out.attentions


def zero_heads(layer, heads):
    """A pre-hook on the output projection: the input columns of ``heads`` set to 0."""
    d = layer.head_dim

    def hook(module, args):
        x = args[0].clone()
        for h in heads:
            x[..., h * d : (h + 1) * d] = 0.0
        return (x, *args[1:])

    return hook


def head_inputs(eager, model, ids, mask):
    """Each layer's input to its output projection in the eager model: (batch, q_pos, head*d)."""
    seen = []
    hooks = []
    for layer in model.attention_layers():
        consumer = eager.get_submodule(layer.output.path)
        hooks.append((consumer, lambda m, args: seen.append(args[0].detach().clone())))
    eager_run(eager, ids, mask, hooks)
    return seen


def contribution_norms(eager, layer, x):
    """||head h's output through W_O|| per (batch, head, q_pos), from the module itself:
    W_O(x with only head h's columns) - W_O(0)."""
    consumer = eager.get_submodule(layer.output.path)
    d = layer.head_dim
    with torch.no_grad():
        base = consumer(torch.zeros_like(x))
        norms = []
        for h in range(layer.num_heads):
            only = torch.zeros_like(x)
            only[..., h * d : (h + 1) * d] = x[..., h * d : (h + 1) * d]
            norms.append((consumer(only) - base).double().norm(dim=-1))
    return torch.stack(norms, dim=1)  # (batch, head, q_pos)


def reference_means(w: torch.Tensor, real: torch.Tensor, contributions: torch.Tensor) -> dict:
    """name -> (head,) means over real queries of weights w (batch, head, q, k), float64."""
    w = w.double()
    n = w.shape[-1]
    q = torch.arange(n)
    per_query = {
        "entropy": entropy(w),
        "max_weight": w.amax(-1),
        "first": w[..., 0],
        "self": w.diagonal(dim1=-2, dim2=-1),
        "distance": (w * (q[:, None] - q[None, :]).abs().double()).sum(-1),
        "contribution_norm": contributions,
    }
    weight = real.double()[:, None, :]  # (batch, 1, q)
    means = {k: (v * weight).sum(dim=(0, 2)) / weight.sum() for k, v in per_query.items()}
    prev = torch.nn.functional.pad(w.diagonal(offset=-1, dim1=-2, dim2=-1), (1, 0))
    after = weight * (q >= 1).double()
    means["prev"] = (prev * after).sum(dim=(0, 2)) / after.sum()
    means["received"] = (w * weight[..., None]).sum(dim=(0, 2))  # (head, k)
    return means


def assert_statistics_equal_eager(model, eager, ids, mask):
    """Every streamed statistic of every attention layer of ``model`` equals the one computed
    from ``eager``'s weights (1e-5). A layer without an output projection (a gate before it)
    must hold no contribution norm; the others are compared all the same."""
    _, per_layer = model_head_sums(model, batch_of(ids, mask))
    _, attentions = eager_run(eager, ids, mask)
    gated = [layer.output is None for layer in model.attention_layers()]
    inputs = [None] * len(gated) if all(gated) else head_inputs(eager, model, ids, mask)
    for layer, sums, w, x in zip(
        model.attention_layers(), per_layer, attentions, inputs, strict=True
    ):
        norms = torch.zeros(w.shape[:3]) if x is None else contribution_norms(eager, layer, x)
        want = reference_means(w, mask.bool(), norms)
        if layer.output is None:
            assert "contribution_norm" not in sums.sums
            del want["contribution_norm"]
        for metric, expected in want.items():
            if metric == "received":
                got = sums.received
            else:
                count = sums.n_prev if metric == "prev" else sums.n_queries
                got = sums.sums[metric] / count
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=metric)


@pytest.mark.parametrize("name", FAMILIES)
def test_statistics_equal_eager_weights(name, hf_loaded, hf_eager):
    assert_statistics_equal_eager(hf_loaded(name), hf_eager(name), *padded(4))


def test_statistics_stay_those_of_eager_when_freed_memory_goes_back_after_each_layer(
    hf_loaded, hf_eager, monkeypatch
):
    # A budget of 0: a return after every layer that grew at all, and one after the forward.
    import headlab.attention.freed_memory as freed_memory
    import headlab.heads.model_head_sums as head_sums

    returns = []
    real = freed_memory.return_freed_memory

    def counted() -> bool:
        returns.append(1)
        return real()

    monkeypatch.setattr(head_sums, "FREED_BUDGET", 0)
    monkeypatch.setattr(freed_memory, "return_freed_memory", counted)
    monkeypatch.setattr(head_sums, "return_freed_memory", counted)
    assert_statistics_equal_eager(hf_loaded("llama"), hf_eager("llama"), *padded(5))
    assert returns  # at least the one after the forward


@pytest.mark.parametrize("name", FAMILIES)
def test_detectors_equal_eager_weights(name, hf_loaded, hf_eager):
    assert_detectors_equal_eager(hf_loaded(name), hf_eager(name))


def assert_detectors_equal_eager(model, eager):
    """Every detector score of every attention layer equals the eager weights' (1e-5)."""
    vocabulary = torch.arange(1, VOCAB)
    got = detect_heads(model, vocabulary, 5, count=3)
    ids = repeated_random_tokens(vocabulary, 5, 3)
    _, attentions = eager_run(eager, ids, torch.ones_like(ids))
    assert len(attentions) == model.num_layers
    for layer, w in enumerate(attentions):
        want = detector_scores(w.double(), 5)
        for kind in DETECTORS:
            torch.testing.assert_close(
                torch.tensor(got[kind][layer], dtype=torch.float64),
                want[kind],
                atol=1e-5,
                rtol=1e-5,
                msg=kind,
            )


def _ablated_heads(model) -> tuple[dict[int, list[int]], int, int]:
    """(layer -> query heads the test ablates, the layer of the K/V group, the group): query
    head 1 of layer 0 and the whole last K/V group of the last layer."""
    last = model.num_layers - 1
    layer = model.attention_layers()[last]
    group = layer.num_kv_heads - 1
    size = layer.num_heads // layer.num_kv_heads
    return {0: [1], last: list(range(group * size, (group + 1) * size))}, last, group


@contextlib.contextmanager
def _ablation(model):
    """Query head 1 of layer 0 and the whole last K/V group of the last layer, ablated."""
    _, last, group = _ablated_heads(model)
    layers = model.attention_layers()
    with ablate(layers[0], [1]), ablate(layers[last], kv_groups=[group]):
        yield


def _hooks(model, eager):
    heads, _, _ = _ablated_heads(model)
    layers = model.attention_layers()
    return [
        (eager.get_submodule(layers[i].output.path), zero_heads(layers[i], chosen))
        for i, chosen in heads.items()
    ]


@pytest.mark.parametrize("name", FAMILIES)
def test_ablating_a_head_and_a_kv_group_equals_the_hook_on_the_output_projection(
    name, hf_loaded, hf_eager
):
    model, eager = hf_loaded(name), hf_eager(name)
    ids, mask = padded(5)
    expected, _ = eager_run(eager, ids, mask, _hooks(model, eager))
    plain, _ = eager_run(eager, ids, mask)
    with _ablation(model), torch.no_grad():
        got = model._outputs(ids, mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    assert (plain[real] - expected[real]).abs().max() > 1e-3  # the ablation changes something


@pytest.mark.parametrize("name", DECODERS)
def test_generation_with_an_ablation_equals_eager_generation_with_the_hook(
    name, hf_loaded, hf_eager
):
    """Every decoding step (with the model's own KV cache) runs with the ablation: the scores
    of each step equal eager's with the hook on the output projection, and so do the tokens."""
    model, eager = hf_loaded(name), hf_eager(name)
    prompt = text(6, 7)
    ids = torch.tensor([model.encode(prompt)])
    options = {
        "max_new_tokens": 8,
        "do_sample": False,
        "output_scores": True,
        "return_dict_in_generate": True,
        "attention_mask": torch.ones_like(ids),
    }
    with contextlib.ExitStack() as stack:
        for module, hook in _hooks(model, eager):
            stack.callback(module.register_forward_pre_hook(hook).remove)
        with torch.no_grad():
            expected = eager.generate(ids, **options)
    with _ablation(model):
        with torch.no_grad():
            got = model.model.generate(ids, **options)
        tokens = model.generate(prompt, 8)
    assert tokens == expected.sequences[0, ids.shape[1] :].tolist()
    for step, (a, b) in enumerate(zip(got.scores, expected.scores, strict=True)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=f"step {step}")


def _repeating_text() -> str:
    """52 words: a 14-word passage, 23 words of filler, the passage again (a known repeat)."""
    passage = " ".join(f"w{(11 * i) % 97 + 1}" for i in range(14))
    filler = " ".join(f"w{(3 * i + 1) % 89 + 1}" for i in range(23))
    return f"w1 {passage} {filler} {passage}"


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "gpt_oss"])
def test_long_text_roles_equal_the_full_eager_weights(name, hf_loaded, hf_eager, monkeypatch):
    """One text with a known repeat through ``long_text_statistics`` (one streaming pass: the
    statistics, window errors per head and per K/V group, copy weights, retrieval hits, the
    blocked map and the received profile) against the same scores from eager's full weights and
    logits; the values (the function's input, not computed by headlab) are recorded at the v
    site. GQA, a sliding window, soft-cap, sinks."""
    import headlab.heads.attention_maps as attention_maps
    from headlab.heads.long_context import long_text_statistics
    from headlab.heads.repeats import copy_sources

    monkeypatch.setattr(attention_maps, "MAX_BLOCKS", 32)  # blocks of 2 at 52 tokens
    model, eager = hf_loaded(name), hf_eager(name)
    window = (2, 5)
    result = long_text_statistics(model, _repeating_text(), window=window, min_match=4)
    batch = model.tokenize([_repeating_text()])
    ids = batch.input_ids
    n = ids.shape[1]
    logits, attentions = eager_run(eager, ids, torch.ones_like(ids))
    with contextlib.ExitStack() as stack, torch.no_grad():
        recordings = [
            stack.enter_context(record(layer, ["v"])) for layer in model.attention_layers()
        ]
        model.run(batch)
    sources = copy_sources(ids[0], 4)
    copies = (sources >= 0).nonzero()[:, 0]
    assert len(copies) == 14 - 4 and result.roles.copy_positions == len(copies)
    correct = logits[0, copies].argmax(-1) == ids[0, copies + 1]
    offset = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    allowed = ((offset >= 0) & (offset < window[1])) | (torch.arange(n)[None] < window[0])
    block = result.maps.block
    assert result.maps.bin == 1 and block == 2  # 52 tokens: blocks of 2, every key its own bin
    in_block = torch.nn.functional.one_hot(torch.arange(n) // block).double()  # (pos, q_block)
    for layer, (w, recording) in enumerate(zip(attentions, recordings, strict=True)):
        w = w[0].double()  # (head, q, k)
        v = recording["v"][0].double()
        groups = v.shape[0]
        v = v.repeat_interleave(w.shape[0] // groups, dim=0)  # (head, k, d)
        full = w @ v
        kept = w * allowed.double()
        # a sink logit's weight (1 - the row's sum: gpt-oss) stays in the masked run's softmax
        sink = 1 - w.sum(-1, keepdim=True)
        windowed = (kept @ v) / (kept.sum(-1, keepdim=True) + sink)
        error = ((full - windowed).norm(dim=-1) / full.norm(dim=-1)).mean(-1)
        # the blocked map: mass from each block of queries to each block of keys, per query
        mass = torch.einsum("qa,hqk,kb->hab", in_block, w, in_block)
        blocked = mass / in_block.sum(0)[None, :, None]
        torch.testing.assert_close(
            torch.tensor(result.maps.blocked[layer], dtype=torch.float64),
            blocked,
            atol=1e-3,
            rtol=1e-3,
        )  # 4 significant digits kept
        torch.testing.assert_close(
            torch.tensor(result.maps.received[layer], dtype=torch.float64),
            w.sum(1),
            atol=1e-3,
            rtol=1e-3,
        )
        group_error = error.view(groups, -1).amax(-1)  # a group shrinks only if all its heads can
        torch.testing.assert_close(
            torch.tensor(result.roles.group_window_error[layer], dtype=torch.float64),
            group_error,
            atol=1e-5,
            rtol=1e-5,
        )
        checks = {
            "window_error": (result.roles.window_error[layer], error),
            "copy_weight": (
                result.roles.copy_weight[layer],
                w[:, copies, sources[copies]].mean(-1),
            ),
            "retrieval": (
                result.roles.retrieval[layer],
                ((w[:, copies].argmax(-1) == sources[copies]) & correct).double().mean(-1),
            ),
            "first": (result.statistics.metrics["first"][layer], w[..., 0].mean(-1)),
            "entropy": (result.statistics.metrics["entropy"][layer], entropy(w).mean(-1)),
        }
        for metric, (got, want) in checks.items():
            torch.testing.assert_close(
                torch.tensor(got, dtype=torch.float64), want, atol=1e-5, rtol=1e-5, msg=metric
            )
        received = torch.from_numpy(result.received[layer])  # (head, k_pos)
        torch.testing.assert_close(received, w.sum(1), atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("name", ["llama", "gemma2", "gpt_oss", "bert"])
def test_bfloat16_statistics_are_within_their_precision_of_float32(name, hf_dirs, hf_loaded):
    """A bfloat16 model's statistics are as close to float32's as those of transformers' own
    bfloat16 eager weights are (within twice their error, or bfloat16's resolution of the
    statistic's scale); contribution norms within bfloat16's resolution."""
    from hf_families import model_class

    from headlab.models.hf import load_transformers

    ids, mask = padded(3)
    batch, real = batch_of(ids, mask), mask.bool()

    def means(model):
        _, per_layer = model_head_sums(model, batch)
        return [
            {k: v / (s.n_prev if k == "prev" else s.n_queries) for k, v in s.sums.items()}
            for s in per_layer
        ]

    exact = means(hf_loaded(name))
    half = means(load_transformers(hf_dirs[name], dtype=torch.bfloat16))

    def eager(dtype):
        reference = model_class(FAMILIES[name]).from_pretrained(
            hf_dirs[name], attn_implementation="eager", dtype=dtype
        )
        _, attentions = eager_run(reference.eval(), ids, mask)
        return [reference_means(w, real, torch.zeros(w.shape[:3])) for w in attentions]

    theirs_exact, theirs_half = eager(torch.float32), eager(torch.bfloat16)
    for layer in range(len(exact)):
        for metric, value in exact[layer].items():
            scale = 2**-7 * max(float(value.abs().max()), 1e-3)
            ours = float((half[layer][metric] - value).abs().max())
            if metric == "contribution_norm":
                assert ours <= 2 * scale, (layer, metric, ours)
                continue
            transformers_error = float(
                (theirs_half[layer][metric] - theirs_exact[layer][metric]).abs().max()
            )
            assert ours <= max(2 * transformers_error, scale), (layer, metric, ours)


@pytest.mark.parametrize("name", ["llama", "gpt2", "gpt_oss", "bert"])
def test_traces_hold_eager_weights_and_the_output_projection(name, hf_loaded, hf_eager):
    """``trace_batch``: the weights are eager's, each head's contributions through W_O sum with
    the projection's bias to the projection's output, which is eager's input to the rest."""
    model, eager = hf_loaded(name), hf_eager(name)
    ids, mask = padded(12)
    batch = batch_of(ids, mask)
    output, traces = model.trace_batch(batch)
    _, attentions = eager_run(eager, ids, mask)
    real = mask.bool()
    with torch.no_grad():
        torch.testing.assert_close(output, model.run(batch))
    for layer, trace, w in zip(model.attention_layers(), traces, attentions, strict=True):
        rows = real[:, None, :, None]
        torch.testing.assert_close(trace.weights * rows, w * rows, atol=1e-6, rtol=1e-5)
        bias = eager.get_submodule(layer.output.path).bias
        summed = trace.contributions.sum(1) + (0 if bias is None else bias)
        torch.testing.assert_close(summed, trace.output, atol=1e-5, rtol=1e-5)
        assert trace.q.shape[1] == layer.num_heads and trace.k.shape[1] == layer.num_kv_heads


def hidden_keys(heads: list[int], sinks: int, window: int):
    """A forward pre-hook on an eager attention module: the query ``heads`` lose every key
    beyond the first ``sinks`` and the last ``window`` (their mask entries set to eager's own
    masked value), through the additive mask eager adds to the scores, made per head."""

    def hook(module, args, kwargs):
        mask = kwargs["attention_mask"]  # (batch, 1, q, k): 0 or finfo.min, added to the scores
        assert mask.dim() == 4 and mask.shape[1] == 1 and mask.is_floating_point()
        batch, _, q_len, k_len = mask.shape
        queries = torch.arange(q_len)[:, None] + (k_len - q_len)
        keys = torch.arange(k_len)[None, :]
        outside = (queries - keys >= window) & (keys >= sinks)  # (q, k)
        per_head = mask.expand(batch, module.config.num_attention_heads, q_len, k_len).clone()
        per_head[:, heads] = per_head[:, heads].masked_fill(outside, torch.finfo(mask.dtype).min)
        return args, {**kwargs, "attention_mask": per_head}

    return hook


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt_oss"])
def test_a_kv_plan_equals_eager_with_those_keys_hidden_by_hand(name, hf_loaded, hf_eager):
    """``kv_budget.planned``: the windowed K/V groups' query heads see only 2 sinks and the last
    3 keys; eager with those keys masked per head in its own additive mask gives the same logits
    on a right-padded batch. GQA (6 heads on 2 K/V heads), Mistral's window 4 on every layer
    (the plan's 3 bites inside it), gpt-oss's sinks and its window on layer 0."""
    from headlab.heads.kv_budget import KVPlan, planned

    model, eager = hf_loaded(name), hf_eager(name)
    plan = KVPlan(((0, 1), (1, 0)), sinks=2, window=3)
    ids, mask = padded(7)
    with torch.no_grad(), planned(model, plan):
        got = model._outputs(ids, mask)
    assert all(layer.sites.budget is None for layer in model.attention_layers())
    layers = model.attention_layers()
    size = layers[0].num_heads // layers[0].num_kv_heads
    hooks = []
    for layer, group in plan.windowed:
        heads = list(range(group * size, (group + 1) * size))
        hooks.append((eager.get_submodule(layers[layer].path), hidden_keys(heads, 2, 3)))
    with contextlib.ExitStack() as stack, torch.no_grad():
        for module, hook in hooks:
            stack.callback(module.register_forward_pre_hook(hook, with_kwargs=True).remove)
        expected = eager(input_ids=ids, attention_mask=mask).logits
    plain, _ = eager_run(eager, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    assert (plain[real] - expected[real]).abs().max() > 1e-4  # the plan hides something (10x atol)
