"""Which path the kernel takes for each kind of call, decided in one place (``choose_path``).

The fast paths are what the benchmarks rely on: a plain ``forward(need_weights=False)`` with no
site must reach SDPA, the default forward in inference the blocked loop, in training the
averaged function. Each row of the table is one kind of call, through the module or the kernel;
the chosen path is recorded by wrapping ``choose_path``, and SDPA by a spy on
``F.scaled_dot_product_attention`` (called exactly once when the path is "fused", once for
every head and once a block of queries for the budgeted heads when it is "banded").
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import pytest
import torch
import torch.nn.functional as F

import headlab.attention.kernel as kernel
from headlab import MultiHeadAttention
from headlab.attention.head_groups import HeadGroupView
from headlab.attention.interventions import ablate, intervene
from headlab.attention.kernel import AttendOptions
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sites import KeyBudget
from headlab.attention.streaming_sums import StatisticsRequest, observing

E, H, G, T, B = 24, 4, 2, 9, 3  # distinct sizes


def _module(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(E, H, batch_first=True, num_kv_heads=G, **kwargs).eval()


def _x(grad: bool = False) -> torch.Tensor:
    return torch.randn(B, T, E, generator=torch.Generator().manual_seed(1), requires_grad=grad)


def _call(kind: str) -> None:
    """Run one kind of call."""
    m = _module()
    x = _x(grad="grad" in kind)
    q = torch.randn(B, H, T, 6, dtype=torch.float64)
    kv = torch.randn(B, G, T, 6, dtype=torch.float64)
    sharpen = lambda w: w * 1.0  # noqa: E731
    contexts = {
        "fast": nullcontext(),
        "fast grad": nullcontext(),
        "default": nullcontext(),
        "default grad": nullcontext(),
        "per head": nullcontext(),
        "fast head_outputs site": intervene(m, "head_outputs", lambda t: t * 2),
        "fast ablated": ablate(m, [1]),
        "fast weights site": intervene(m, "weights", sharpen),
        "fast scores site": intervene(m, "scores", sharpen),
        "observed": observing(m, StatisticsRequest()),
        "observed default": observing(m, StatisticsRequest()),
        "observed grad": observing(m, StatisticsRequest()),
    }
    if kind in contexts:
        with ExitStack() as stack:
            stack.enter_context(contexts[kind])
            if "grad" not in kind:
                stack.enter_context(torch.no_grad())
            need = not kind.startswith(("fast", "observed")) or kind == "observed default"
            m(x, x, x, need_weights=need, average_attn_weights=kind != "per head")
    elif kind == "default large":
        with torch.no_grad():
            m(x, x, x)
    elif kind == "default dropout":
        m = _module(dropout=0.5).train()
        m(x, x, x)
    elif kind == "default mask with grad":
        m(x, x, x, attn_mask=torch.zeros(T, T, requires_grad=True))
    elif kind == "trace":
        with torch.no_grad():
            m.trace(x)
    elif kind == "causal fast":
        with torch.no_grad():
            _module(causal=True)(x, x, x, need_weights=False)
    elif kind == "rotary padded fast":
        padding = torch.zeros(B, T, dtype=torch.bool)
        padding[0, -2:] = True
        with torch.no_grad():
            _module(rotary_base=100.0)(x, x, x, key_padding_mask=padding, need_weights=False)
    elif kind == "view fast":
        with torch.no_grad():
            HeadGroupView(m, 2)(x, x, x, need_weights=False)
    elif kind == "view default":
        with torch.no_grad():
            HeadGroupView(m, 2)(x, x, x)
    elif kind == "softcap no grad":
        with torch.no_grad():
            kernel.attend(q, kv, kv, None, AttendOptions(softcap=2.0))
    elif kind in ("softcap grad", "softcap grad large"):
        kernel.attend(q.requires_grad_(), kv, kv, None, AttendOptions(softcap=2.0))
    elif kind == "sinks grad large":
        kernel.attend(
            q,
            kv.requires_grad_(),
            kv,
            None,
            AttendOptions(sinks=torch.zeros(H, dtype=torch.float64)),
        )
    elif kind == "sinks grad large weights":
        sinks = torch.zeros(H, dtype=torch.float64)
        options = AttendOptions(sinks=sinks, need_weights="heads")
        kernel.attend(q, kv.requires_grad_(), kv, None, options)
    elif kind == "window no grad":
        with torch.no_grad():
            kernel.attend(q, kv, kv, MaskSpec(causal=True, window=3))
    elif kind == "window grad":
        kernel.attend(q.requires_grad_(), kv, kv, MaskSpec(causal=True, window=3))
    elif kind == "budget no grad":  # a KV plan's layer
        budget = KeyBudget(1, 3, torch.tensor([True, False, False, True]))
        with torch.no_grad():
            kernel.attend(q, kv, kv, MaskSpec(causal=True, budget=budget))
    else:
        raise AssertionError(kind)


TABLE = [
    # plain forward(need_weights=False) with no site: torch's fused kernel, with grad or not
    ("fast", "fused"),
    ("fast grad", "fused"),
    ("causal fast", "fused"),
    ("rotary padded fast", "fused"),
    # sites outside the score matrix keep SDPA; on the matrix they need it whole
    ("fast head_outputs site", "fused"),
    ("fast ablated", "fused"),
    ("fast weights site", "explicit"),
    ("fast scores site", "explicit"),
    # the default (averaged weights): in place when small, blocks when large, own backward
    ("default", "whole"),
    ("default large", "blocked"),
    ("default grad", "averaged"),
    ("default dropout", "explicit"),
    ("default mask with grad", "explicit"),
    ("per head", "explicit"),
    ("trace", "explicit"),
    # what SDPA cannot do: chunks without grad, whole tensors with it
    ("view fast", "chunked"),
    ("view default", "explicit"),
    ("softcap no grad", "chunked"),
    ("softcap grad", "explicit"),
    # with grad and large: chunks again, each chunk's weights recomputed in the backward
    ("softcap grad large", "recomputed"),
    ("sinks grad large", "recomputed"),
    ("sinks grad large weights", "explicit"),
    ("window no grad", "chunked"),
    ("window grad", "fused"),
    # a KV plan without grad: SDPA for every head, then SDPA over each budgeted head's band
    ("budget no grad", "banded"),
    # statistics: streamed in chunks, or from the whole matrix where it is needed anyway
    ("observed", "streamed"),
    ("observed default", "streamed-whole"),
    ("observed grad", "streamed-whole"),
]


@pytest.mark.parametrize(("kind", "path"), TABLE, ids=[kind for kind, _ in TABLE])
def test_each_kind_of_call_takes_its_path(kind, path, monkeypatch):
    chosen, sdpa = [], []
    choose, fused = kernel.choose_path, F.scaled_dot_product_attention
    monkeypatch.setattr(
        kernel, "choose_path", lambda *a, **o: chosen.append(choose(*a, **o)) or chosen[-1]
    )
    monkeypatch.setattr(
        F, "scaled_dot_product_attention", lambda *a, **o: sdpa.append(1) or fused(*a, **o)
    )
    if kind == "default large":
        monkeypatch.setattr(kernel, "MIN_BLOCKED", 1)
    if kind.endswith(("large", "large weights")):
        monkeypatch.setattr(kernel, "MIN_RECOMPUTED", 1)
    _call(kind)
    assert chosen == [path]
    assert len(sdpa) == (path == "fused") or (path == "banded" and len(sdpa) > 1)


def test_every_path_is_in_the_table():
    assert {path for _, path in TABLE} == set(kernel.Path.__args__)
