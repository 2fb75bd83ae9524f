"""Every export route gives the eager module's outputs: torch.jit.trace, torch.onnx.export (legacy
and dynamo, run in onnxruntime), torch.export and torch.compile(fullgraph=True).

Each route records the module on one input and runs the record on another input of the same
shape with another padding mask, so that nothing value-dependent (which rows are fully masked)
can have been frozen into the graph. torch.jit.script is not supported (docs/dropin.md says why).
"""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from headlab import MultiHeadAttention

B, L, E, H = 2, 5, 12, 4

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated"),
    pytest.mark.filterwarnings("ignore:`torch.jit.trace_method` is deprecated"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
    pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
    pytest.mark.filterwarnings("ignore:The feature will be removed"),
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
]


class Call(nn.Module):
    """Self-attention with fixed options; returns tensors only, as exporters require."""

    def __init__(self, attention: MultiHeadAttention, need_weights: bool, masks: bool) -> None:
        super().__init__()
        self.attention, self.need_weights, self.masks = attention, need_weights, masks

    def forward(self, x, key_padding_mask, attn_mask):
        masks = {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask} if self.masks else {}
        out, weights = self.attention(x, x, x, need_weights=self.need_weights, **masks)
        return (out, weights) if self.need_weights else (out,)


def _inputs(seed: int, dead_rows: bool):
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(seed))
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, : 3 if dead_rows else 1] = True  # with the causal mask: rows 0-2 see no key
    padding[0, -1] = True
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    return x, padding, causal


def _onnx(call: Call, args, dynamo: bool):
    ort = pytest.importorskip("onnxruntime")
    names = ["x", "key_padding_mask", "attn_mask"]
    if dynamo:
        program = torch.onnx.export(call, args, dynamo=True, input_names=names)
        data = program.model_proto.SerializeToString()
    else:
        buffer = io.BytesIO()
        torch.onnx.export(call, args, buffer, dynamo=False, input_names=names)
        data = buffer.getvalue()
    session = ort.InferenceSession(data)
    wanted = {i.name for i in session.get_inputs()}

    def run(*tensors):
        feeds = {n: t.numpy() for n, t in zip(names, tensors, strict=True) if n in wanted}
        return [torch.from_numpy(o) for o in session.run(None, feeds)]

    return run


def _record(route: str, call: Call, args):
    if route == "jit.trace":
        return torch.jit.trace(call, args)
    if route == "torch.export":
        return torch.export.export(call, args).module()
    if route == "compile":
        return torch.compile(call, fullgraph=True, backend="aot_eager")
    return _onnx(call, args, dynamo=route == "onnx.dynamo")


ROUTES = ["jit.trace", "onnx.legacy", "onnx.dynamo", "torch.export", "compile"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("num_kv_heads", [H, 2])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masks", [False, True])
def test_export_route_gives_the_eager_outputs(route, num_kv_heads, need_weights, masks):
    torch.manual_seed(0)
    attention = MultiHeadAttention(E, H, num_kv_heads=num_kv_heads, batch_first=True)
    call = Call(attention, need_weights, masks).eval()
    recorded = _record(route, call, _inputs(1, dead_rows=False))
    args = _inputs(2, dead_rows=True)
    expected = call(*args)
    got = recorded(*args)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if masks:  # the rows with no visible key are zeros (not NaN), as in eager mode
        torch.testing.assert_close(got[0][1, :3], attention.out_proj.bias.expand(3, E))


def test_compile_with_inductor_and_rotary_causal_gqa():
    """The decoder configuration (rotary, causal, GQA) through inductor's generated code."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(
        E, H, num_kv_heads=2, rotary_base=50.0, causal=True, head_dim=4, batch_first=True
    ).eval()
    x = torch.randn(B, L, E)
    for need_weights in (False, True):
        compiled = torch.compile(
            lambda x, nw=need_weights: attention(x, x, x, need_weights=nw), fullgraph=True
        )
        got, expected = compiled(x), attention(x, x, x, need_weights=need_weights)
        for a, b in zip(got, expected, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
