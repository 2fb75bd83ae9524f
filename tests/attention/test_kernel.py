"""The one kernel against a hand-written float64 reference, on every path it takes.

The reference below loops over batch elements, heads and query rows and decides each key's
visibility from the mask description by its definition (no tensor masks, no softmax of torch's:
exp and a sum), so that a swapped axis, an off-by-one window or a wrong group fails. Hypothesis
draws the shapes (distinct sizes), every mask kind, grouped K/V heads, soft-capping, sink
logits, extra key columns, head views and query offsets; each path of ``attend`` must agree:
explicit (autograd), fused (SDPA), averaged (its own backward, and blocks without grad),
chunked (blocks of rows), and the streamed statistics. A fully masked row is zero everywhere.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import headlab.attention.chunked as chunked_path
import headlab.attention.kernel as kernel
from headlab.attention.functional import entropy
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sites import KeyBudget
from headlab.attention.streaming_sums import StatisticsRequest

F64 = torch.float64


def reference(q, k, v, spec: MaskSpec | None, *, scale, softcap=None, sinks=None, view=None):
    """(head_out (B, H, Q, Dv), weights (B, view or H, Q, K)) by loops, float64."""
    spec = spec or MaskSpec()
    batch, heads, q_len, _ = q.shape
    groups, k_len = k.shape[1], k.shape[2]
    real = k_len - spec.extra_keys
    shown = view or heads
    m = heads // shown
    out = torch.zeros(batch, heads, q_len, v.shape[-1], dtype=F64)
    weights = torch.zeros(batch, shown, q_len, k_len, dtype=F64)
    for b in range(batch):
        for h in range(shown):
            members = range(h * m, (h + 1) * m)
            for i in range(q_len):
                p = spec.q_offset + i
                logits, visible = [], []
                for j in range(k_len):
                    s = (
                        sum(float(q[b, g, i] @ k[b, g // (heads // groups), j]) for g in members)
                        * scale
                        / math.sqrt(m)
                    )
                    if softcap is not None:
                        s = softcap * math.tanh(s / softcap)
                    hidden = False
                    if j < real:
                        hidden, added = _hidden(spec, b, h, i, p, j)
                        s += added
                    logits.append(s)
                    visible.append(not hidden)
                if not any(visible):
                    continue  # a dead row: zero weights, zero output
                top = max(s for s, seen in zip(logits, visible, strict=True) if seen)
                # a view's sink: its members' sink logits merged as its scores are
                sink = None if sinks is None else sum(float(sinks[g]) for g in members) / m**0.5
                if sink is not None:
                    top = max(top, sink)
                e = [
                    math.exp(s - top) if seen else 0.0
                    for s, seen in zip(logits, visible, strict=True)
                ]
                total = sum(e) + (0.0 if sink is None else math.exp(sink - top))
                row = torch.tensor(e, dtype=F64) / total
                weights[b, h, i] = row
                for g in members:
                    out[b, g, i] = row @ v[b, g // (heads // groups)].to(F64)
    return out, weights


def _hidden(spec: MaskSpec, b: int, h: int, i: int, p: int, j: int) -> tuple[bool, float]:
    """Whether key j is hidden from query row i (position p) of head h, and what is added."""
    hidden, added = False, 0.0
    if spec.attn_mask is not None:
        a = spec.attn_mask
        value = a[
            b if a.shape[0] > 1 else 0, h if a.shape[1] > 1 else 0, i if a.shape[2] > 1 else 0, j
        ]
        if a.dtype == torch.bool:
            hidden |= bool(value)
        else:
            added += float(value)
    if spec.causal:
        hidden |= j > p
    if spec.window is not None:
        heads_windowed = spec.window_heads is None or bool(spec.window_heads[h])
        far = (p - j >= spec.window) if spec.causal else abs(p - j) >= spec.window
        hidden |= heads_windowed and far and j >= spec.window_sinks
    if spec.budget is not None:
        budget = spec.budget
        far = (p - j >= budget.window) if spec.causal else abs(p - j) >= budget.window
        hidden |= bool(budget.heads[h]) and far and j >= budget.sinks
    if spec.key_padding is not None:
        hidden |= bool(spec.key_padding[b, j])
    if spec.rows is not None:
        block = spec.rows(i, i + 1)
        hidden |= bool(block[b if block.shape[0] > 1 else 0, h if block.shape[1] > 1 else 0, 0, j])
    if spec.bias is not None:
        a = spec.bias
        added += float(
            a[b if a.shape[0] > 1 else 0, h if a.shape[1] > 1 else 0, i if a.shape[2] > 1 else 0, j]
        )
    return hidden, added


@st.composite
def cases(draw, *, plain: bool = False):
    """(q, k, v, spec, options) with distinct sizes and a drawn mix of every mask kind."""
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    batch = draw(st.sampled_from([1, 2]))
    heads, groups = draw(st.sampled_from([(6, 2), (6, 3), (6, 6), (4, 1), (3, 3)]))
    q_len = draw(st.integers(1, 7))
    offset = draw(st.sampled_from([0, 0, 2]))
    extra = draw(st.sampled_from([0, 0, 1, 2]))
    real = q_len + offset + draw(st.sampled_from([0, 0, 3]))
    k_len = real + extra
    d, dv = 5, 3
    q = torch.randn(batch, heads, q_len, d, generator=g, dtype=F64)
    k = torch.randn(batch, groups, k_len, d, generator=g, dtype=F64)
    v = torch.randn(batch, groups, k_len, dv, generator=g, dtype=F64)
    view = (
        None
        if plain
        else draw(st.sampled_from([None, None, 1, heads // groups if groups < heads else None]))
    )
    shared = view is not None  # a view takes masks shared by all heads
    mask_heads = 1 if shared else heads
    kind = draw(st.sampled_from(["none", "bool", "float"]))
    attn = None
    if kind == "bool":
        attn = torch.rand(batch, mask_heads, q_len, real, generator=g) < 0.3
    elif kind == "float":
        attn = torch.randn(1, mask_heads, q_len, real, generator=g, dtype=F64)
    padding = None
    if draw(st.booleans()):
        padding = torch.rand(batch, real, generator=g) < 0.3
        if batch > 1 and draw(st.booleans()):
            padding[1] = True  # every real key of one element hidden: dead rows without extras
    window = draw(st.sampled_from([None, None, 1, 2, 3]))
    window_heads = None
    if window is not None and not shared and draw(st.booleans()):
        window_heads = torch.tensor([h % 2 == 0 for h in range(heads)])
    rows_mask = None
    if draw(st.booleans()):
        lazy = torch.rand(1, 1, q_len, real, generator=g) < 0.2
        rows_mask = lambda start, stop, lazy=lazy: lazy[..., start:stop, :]  # noqa: E731
    bias = None
    if draw(st.booleans()):  # ALiBi-like (one row for every query) or T5-like (a row each)
        bias_batch = draw(st.sampled_from([1, batch]))
        bias_heads = draw(st.sampled_from([1, mask_heads]))
        bias_rows = draw(st.sampled_from([1, q_len]))
        shape = (bias_batch, bias_heads, bias_rows, real)
        bias = torch.randn(*shape, generator=g, dtype=F64)
    budget = None
    if not shared and draw(st.booleans()):
        chosen = torch.tensor([h % 3 == 1 for h in range(heads)])
        budget = KeyBudget(sinks=draw(st.sampled_from([0, 1, 2])), window=2, heads=chosen)
    spec = MaskSpec(
        causal=draw(st.booleans()),
        q_offset=offset,
        key_padding=padding,
        attn_mask=attn,
        window=window,
        window_sinks=draw(st.sampled_from([0, 1])) if window else 0,
        window_heads=window_heads,
        rows=rows_mask,
        bias=bias,
        extra_keys=extra,
        budget=budget,
    )
    options = {
        "scale": draw(st.sampled_from([None, 0.3])),
        "softcap": None if plain else draw(st.sampled_from([None, 2.0])),
        "sinks": None
        if plain
        else draw(
            st.sampled_from(
                [None, torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0, -0.5][:heads], dtype=F64)]
            )
        ),
        "view": view,
    }
    return q, k, v, spec, options


def _reference(q, k, v, spec, options):
    scale = options["scale"] or q.shape[-1] ** -0.5
    return reference(
        q,
        k,
        v,
        spec,
        scale=scale,
        softcap=options["softcap"],
        sinks=options["sinks"],
        view=options["view"],
    )


def _attend(q, k, v, spec, options, **kwargs):
    o = options
    options = AttendOptions(
        scale=o["scale"], softcap=o["softcap"], sinks=o["sinks"], head_view=o["view"], **kwargs
    )
    return attend(q, k, v, spec, options)


@given(cases(), st.sampled_from([None, "heads", "batch"]))
def test_explicit_path_with_autograd(case, scaled):
    q, k, v, spec, options = case
    want_out, want_w = _reference(q, k, v, spec, options)
    head_scale = None  # head_mask: (1, head, 1, 1) or (batch, head, 1, 1)
    if scaled is not None:
        shape = (1 if scaled == "heads" else q.shape[0], q.shape[1], 1, 1)
        head_scale = torch.linspace(-1.5, 2.0, math.prod(shape), dtype=F64).view(shape)
        want_out = want_out * head_scale
    q = q.clone().requires_grad_()
    run = _attend(q, k, v, spec, options, need_weights="heads", head_scale=head_scale)
    torch.testing.assert_close(run.head_out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(run.weights, want_w, atol=1e-10, rtol=1e-10)
    assert run.head_out.grad_fn is not None


@given(cases())
def test_chunked_path_in_blocks_of_rows(case):
    q, k, v, spec, options = case
    want_out, want_w = _reference(q, k, v, spec, options)
    o = options
    with torch.no_grad():
        out, mean = chunked_path.chunked(
            q,
            k,
            v,
            spec,
            scale=o["scale"] or q.shape[-1] ** -0.5,
            softcap=o["softcap"],
            sinks=o["sinks"],
            view=o["view"],
            mean=True,
            sums=None,
            chunk_elements=1,
        )
    torch.testing.assert_close(out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(mean, want_w.mean(dim=1), atol=1e-10, rtol=1e-10)


@given(cases(plain=True))
def test_fused_and_averaged_paths(case):
    q, k, v, spec, options = case
    want_out, want_w = _reference(q, k, v, spec, options)
    with torch.no_grad():
        fused = _attend(q, k, v, spec, options)
        blocked = _attend(q, k, v, spec, options, need_weights="mean")
    torch.testing.assert_close(fused.head_out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(blocked.head_out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(blocked.weights, want_w.mean(dim=1), atol=1e-10, rtol=1e-10)
    q = q.clone().requires_grad_()
    averaged = _attend(q, k, v, spec, options, need_weights="mean")  # AveragedAttention
    torch.testing.assert_close(averaged.head_out, want_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(averaged.weights, want_w.mean(dim=1), atol=1e-10, rtol=1e-10)
    if spec.attn_mask is None or spec.attn_mask.dtype == torch.bool:
        autograd = attend(
            q, k, v, spec, AttendOptions(scale=options["scale"], need_weights="heads")
        )
        grads = torch.autograd.grad(averaged.head_out.sum() + averaged.weights.square().sum(), q)
        want = torch.autograd.grad(
            autograd.head_out.sum() + autograd.weights.mean(1).square().sum(), q
        )
        torch.testing.assert_close(grads[0], want[0], atol=1e-9, rtol=1e-9)


@given(cases(plain=True), st.sampled_from([1, 7, 10**6]), st.sampled_from([(0, 1), (1, 2), (2, 3)]))
def test_streamed_statistics_equal_the_reference_weights(case, chunk, window):
    q, k, v, spec, options = case
    want_out, w = _reference(q, k, v, spec, options)
    batch, heads, q_len, _ = q.shape
    positions = torch.arange(q_len) + spec.q_offset
    g = torch.Generator().manual_seed(q_len)
    sources = torch.randint(-1, int(positions[0]) + 1, (batch, q_len), generator=g)
    collected = []
    request = StatisticsRequest(
        chunk_elements=chunk,
        special={"first": torch.zeros(batch, dtype=torch.long)},
        report=collected.append,
        window=window,
        copy_sources=sources,
        block=3,
    )
    run = _attend(q, k, v, spec, options, statistics=request)
    torch.testing.assert_close(run.head_out, want_out, atol=1e-10, rtol=1e-10)
    (sums,) = collected
    keys = torch.arange(w.shape[-1])
    index = sources.clamp(0)[:, None, :, None].expand(-1, heads, -1, 1)
    on_source = torch.where(sources[:, None] >= 0, w.gather(-1, index)[..., 0], 0.0)
    selfs = [
        w[..., i, p] if p < w.shape[-1] else 0 * w[..., i, 0]
        for i, p in enumerate(positions.tolist())
    ]
    causal = spec.causal and not spec.extra_keys
    want = {
        "entropy": entropy(w),
        "max_weight": w.amax(-1),
        "first": w[..., 0],
        "distance": (w * (positions[:, None] - keys[None, :]).abs()).sum(-1),
        "self": torch.stack(selfs, -1),
        "window_error": _window_error(w, v, positions, window, causal),
        "copy_weight": on_source,
    }
    for name, value in want.items():
        torch.testing.assert_close(
            sums.sums[name], value.sum(dim=(0, 2)), atol=1e-9, rtol=1e-9, msg=name
        )
    torch.testing.assert_close(sums.received, w.sum(dim=(0, 2)), atol=1e-9, rtol=1e-9)
    assert sums.n_queries == batch * q_len
    valid = sources >= 0
    assert sums.n_copy == int(valid.sum())
    hits = (w.argmax(-1) == sources[:, None]).transpose(0, 1)[:, valid]
    assert torch.equal(sums.copy_hits, hits)
    # blocks of 3 queries x 3 keys; query blocks by absolute position
    q_blocks, k_blocks = -(-(spec.q_offset + q_len) // 3), -(-w.shape[-1] // 3)
    mass = torch.zeros(heads, q_blocks, k_blocks, dtype=F64)
    for i, p in enumerate(positions.tolist()):
        for j in range(w.shape[-1]):
            mass[:, p // 3, j // 3] += w[:, :, i, j].sum(0)
    torch.testing.assert_close(sums.blocks, mass, atol=1e-9, rtol=1e-9)
    rows = torch.zeros(q_blocks, dtype=F64)
    for p in positions.tolist():
        rows[p // 3] += batch
    torch.testing.assert_close(sums.block_rows, rows)


def _window_error(w, v, positions, window, causal):
    """||o - o^window|| / ||o|| by definition, from the reference weights (batch, head, q, k)."""
    sinks, size = window
    heads, groups = w.shape[1], v.shape[1]
    v = v.repeat_interleave(heads // groups, dim=1).to(F64)
    keys = torch.arange(w.shape[-1])
    offset = positions[:, None] - keys[None, :]
    near = ((offset >= 0) & (offset < size)) if causal else offset.abs() < size
    allowed = (near | (keys[None, :] < sinks)).to(F64)
    full = w @ v
    kept = w * allowed
    den = kept.sum(-1, keepdim=True)
    windowed = torch.where(den > 0, (kept @ v) / den.clamp_min(1e-300), 0.0)
    lost = (full - windowed).norm(dim=-1)
    norm = full.norm(dim=-1)
    return torch.where(norm > 0, lost / norm.clamp_min(1e-300), 0.0)


PATHS = [
    "explicit",
    "fused",
    "averaged",
    "blocked",
    "chunked",
    "streamed",
    "streamed-whole",
    "whole-baddbmm",
    "blocked-baddbmm",
    "view",
]


@pytest.mark.parametrize("path", PATHS)
def test_a_fully_masked_row_is_zero_on_every_path(path, monkeypatch):
    """Batch element 1 sees no key: its weights, scores, outputs are 0 and its sums finite.
    The baddbmm branch of the in-place paths needs one batch element and no grouped K/V heads:
    there the dead row is a query row of element 0 (an attn_mask row)."""
    g = torch.Generator().manual_seed(5)
    one = "baddbmm" in path
    batch, groups = (1, 4) if one else (2, 2)
    q = torch.randn(batch, 4, 3, 6, generator=g, dtype=F64)
    k, v = (torch.randn(batch, groups, 7, 6, generator=g, dtype=F64) for _ in range(2))
    dead = (0, slice(None), 1) if one else (1,)  # (batch, head, query row) that sees nothing
    if one:
        hidden = torch.zeros(1, 1, 3, 7, dtype=torch.bool)
        hidden[..., 1, :] = True
        spec = MaskSpec(attn_mask=hidden)
    else:
        padding = torch.zeros(2, 7, dtype=torch.bool)
        padding[1] = True  # element 1 sees no key at all
        spec = MaskSpec(key_padding=padding)
    monkeypatch.setattr(kernel, "MIN_BLOCKED", 10**9 if path == "whole-baddbmm" else 1)
    options = {"softcap": 3.0} if path == "chunked" else {}
    chosen = []
    choose = kernel.choose_path
    monkeypatch.setattr(
        kernel, "choose_path", lambda *a, **o: chosen.append(choose(*a, **o)) or chosen[-1]
    )
    if path == "explicit":
        run = attend(
            q.requires_grad_(),
            k,
            v,
            spec,
            AttendOptions(need_weights="heads", sinks=torch.zeros(4, dtype=F64)),
        )
    elif path == "averaged":
        run = attend(q.requires_grad_(), k, v, spec, AttendOptions(need_weights="mean"))
    elif path.startswith("streamed"):
        need = "heads" if path == "streamed-whole" else None
        request = StatisticsRequest(chunk_elements=5)
        run = attend(q, k, v, spec, AttendOptions(statistics=request, need_weights=need))
    elif path == "view":
        run = attend(q, k, v, spec, AttendOptions(head_view=2, need_weights="heads"))
    else:
        with torch.no_grad():
            need = None if path in ("fused", "chunked") else "mean"
            run = attend(q, k, v, spec, AttendOptions(need_weights=need, **options))
    want = {"whole-baddbmm": "whole", "blocked-baddbmm": "blocked", "view": "explicit"}
    assert chosen == [want.get(path, path)]
    assert torch.isfinite(run.head_out).all()
    assert (run.head_out[dead] == 0).all() and (run.head_out != 0).any()
    if run.weights is not None:  # per head (batch, head, q, k) or averaged (batch, q, k)
        averaged_dead = (0, 1) if one else (1,)
        w = run.weights[dead] if run.weights.dim() == 4 else run.weights[averaged_dead]
        assert (w == 0).all()
    if run.scores is not None:
        assert (run.scores[dead] == 0).all() and torch.isfinite(run.scores[dead]).all()
    if run.sums is not None:
        assert all(torch.isfinite(s).all() for s in run.sums.sums.values())


def test_hand_computed_case():
    """One head, two keys, a soft-cap and a sink, by hand."""
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=F64)
    k = torch.tensor([[[[2.0, 0.0], [0.0, 1.0]]]], dtype=F64)
    v = torch.tensor([[[[1.0], [3.0]]]], dtype=F64)
    sinks = torch.tensor([0.5], dtype=F64)
    options = AttendOptions(scale=1.0, softcap=1.0, sinks=sinks, need_weights="heads")
    run = attend(q, k, v, None, options)
    s = [math.tanh(2.0), math.tanh(0.0)]  # cap * tanh(s / cap), cap 1
    z = math.exp(s[0]) + math.exp(s[1]) + math.exp(0.5)
    w = [math.exp(s[0]) / z, math.exp(s[1]) / z]
    torch.testing.assert_close(run.weights[0, 0, 0], torch.tensor(w, dtype=F64))
    torch.testing.assert_close(run.head_out[0, 0, 0, 0].item(), w[0] * 1.0 + w[1] * 3.0)


def test_bad_shapes_are_refused():
    q = torch.randn(1, 5, 2, 4)
    k = torch.randn(1, 2, 3, 4)
    with pytest.raises(
        ValueError, match=r"query heads \(5\) must be a multiple of K/V heads \(2\)"
    ):
        attend(q, k, k)
    with pytest.raises(ValueError, match="head_view must divide the 4 query heads, got 3"):
        attend(torch.randn(1, 4, 2, 4), k, k, None, AttendOptions(head_view=3))
    per_head = MaskSpec(attn_mask=torch.zeros(1, 4, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="a view takes masks shared by all heads"):
        attend(
            torch.randn(1, 4, 2, 4),
            k,
            k,
            per_head,
            AttendOptions(head_view=2, need_weights="heads"),
        )
