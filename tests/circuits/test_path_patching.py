"""Exact path patching against a reference written here with forward hooks on transformers' own
eager model (no headlab code in the reference), on tiny random models of five families: Llama
(GQA), Qwen3 (QK-norm), GPT-2 (fused c_attn, learned positions), GPT-NeoX (parallel attention
and MLP, partial rotary, per-head fused projection), Gemma 2 (post-norms, soft-cap, sliding
window). Every third edge of each model's graph is compared (each kind of receiver among them).

The reference follows the definition: a sender's write is its output through its own slice of
W_O (and the family's post-norm), corrupted minus clean; the receiver's input is the clean
stream plus that write, put through the family's norm and projection, and spliced into the
receiver's columns of the projection's output (exact where QK-norm and rotary act per head).
"""

import pytest
import torch
from hf_families import VOCAB, build

from headlab.circuits import resume
from headlab.circuits.metrics import logit_difference
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach

_LLAMA = {
    "blocks": "model.layers",
    "o": "self_attn.o_proj",
    "ln_attn": "input_layernorm",
    "ln_mlp": "post_attention_layernorm",
    "post_attn": None,
    "post_mlp": None,
    "final": "model.norm",
    "proj": {
        "q": ("self_attn.q_proj", 0),
        "k": ("self_attn.k_proj", 0),
        "v": ("self_attn.v_proj", 0),
    },
    "stride": 1,
}
PARTS = {
    "llama": _LLAMA,
    "qwen3": _LLAMA,
    "gemma2": {
        **_LLAMA,
        "ln_mlp": "pre_feedforward_layernorm",
        "post_attn": "post_attention_layernorm",
        "post_mlp": "post_feedforward_layernorm",
    },
    "gpt2": {
        **_LLAMA,
        "blocks": "transformer.h",
        "o": "attn.c_proj",
        "ln_attn": "ln_1",
        "ln_mlp": "ln_2",
        "final": "transformer.ln_f",
        # c_attn's output is [q | k | v], each embed wide
        "proj": {"q": ("attn.c_attn", 0), "k": ("attn.c_attn", 1), "v": ("attn.c_attn", 2)},
    },
    "gpt_neox": {
        **_LLAMA,
        "blocks": "gpt_neox.layers",
        "o": "attention.dense",
        "final": "gpt_neox.final_layer_norm",
        # query_key_value's output is, per head, [q | k | v] of d_head each
        "proj": {
            "q": ("attention.query_key_value", 0),
            "k": ("attention.query_key_value", 1),
            "v": ("attention.query_key_value", 2),
        },
        "stride": 3,
    },
}


def _columns(parts, input_, index, d_head, width):
    """The projection-output columns of head / K/V head ``index``'s ``input_``."""
    _, part = parts["proj"][input_]
    if parts["stride"] == 3:  # per-head interleaved
        start = index * 3 * d_head + part * d_head
    else:
        start = part * width + index * d_head
    return slice(start, start + d_head)


def sharp(family):
    """The family's tiny random model with its matrices scaled up (the default init, std 0.02,
    leaves GPT-2's edges at 1e-5 of a logit: too close to float32's noise to compare)."""
    model = build(family)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim == 2:
                parameter.mul_(0.3 / max(float(parameter.std()), 1e-6))
    return model


class Reference:
    """The eager transformers model with hooks (see the module docstring)."""

    def __init__(self, family, clean, corrupted):
        self.model = sharp(family)
        self.model.set_attn_implementation("eager")
        self.parts = PARTS[family]
        self.blocks = self.model.get_submodule(self.parts["blocks"])
        config = self.model.config
        self.heads = config.num_attention_heads
        self.width = config.hidden_size
        self.d_head = getattr(config, "head_dim", None) or self.width // self.heads
        self.clean, self.corrupted = self._record(clean), self._record(corrupted)
        self.ids = clean

    def part(self, layer, name):
        return self.blocks[layer].get_submodule(name)

    def _record(self, ids):
        seen = {"in": {}, "o_in": {}, "mlp": {}, "mlp_norm_in": {}}
        handles = []
        for i, block in enumerate(self.blocks):
            handles += [
                block.register_forward_pre_hook(lambda m, a, i=i: seen["in"].__setitem__(i, a[0])),
                block.get_submodule(self.parts["o"]).register_forward_pre_hook(
                    lambda m, a, i=i: seen["o_in"].__setitem__(i, a[0])
                ),
                block.mlp.register_forward_hook(lambda m, a, o, i=i: seen["mlp"].__setitem__(i, o)),
                block.get_submodule(self.parts["ln_mlp"]).register_forward_pre_hook(
                    lambda m, a, i=i: seen["mlp_norm_in"].__setitem__(i, a[0])
                ),
            ]
        with torch.no_grad():
            seen["logits"] = self.model(input_ids=ids).logits
        for h in handles:
            h.remove()
        return seen

    def write(self, sender):
        """Corrupted minus clean write of ``sender`` ("embed", "mlp.L", "L.H")."""
        if sender == "embed":
            return self.corrupted["in"][0] - self.clean["in"][0]
        if sender.startswith("mlp."):
            layer = int(sender[4:])
            post = self._post(layer, "post_mlp")
            return post(self.corrupted["mlp"][layer]) - post(self.clean["mlp"][layer])
        layer, head = (int(x) for x in sender.split("."))
        clean_in = self.clean["o_in"][layer]
        mixed = clean_in.clone()
        cols = slice(head * self.d_head, (head + 1) * self.d_head)
        mixed[..., cols] = self.corrupted["o_in"][layer][..., cols]
        o, post = self.part(layer, self.parts["o"]), self._post(layer, "post_attn")
        return post(o(mixed)) - post(o(clean_in))

    def _post(self, layer, key):
        name = self.parts[key]
        return (lambda x: x) if name is None else self.part(layer, name)

    def patched_logits(self, sender, receiver, input_):
        delta = self.write(sender)
        handles = []
        if receiver == "logits":
            final = self.model.get_submodule(self.parts["final"])
            handles.append(final.register_forward_pre_hook(lambda m, a: (a[0] + delta,)))
        elif receiver.startswith("mlp."):
            layer = int(receiver[4:])
            norm = self.part(layer, self.parts["ln_mlp"])
            new = self.blocks[layer].mlp(norm(self.clean["mlp_norm_in"][layer] + delta))
            handles.append(self.blocks[layer].mlp.register_forward_hook(lambda m, a, o: new))
        else:
            layer_text, index_text = receiver.split(".")
            layer, index = int(layer_text), int(index_text.lstrip("g"))
            normed = self.part(layer, self.parts["ln_attn"])(self.clean["in"][layer] + delta)
            proj = self.part(layer, self.parts["proj"][input_][0])
            cols = _columns(self.parts, input_, index, self.d_head, self.width)
            new = proj(normed)[..., cols]

            def splice(m, a, o):
                o = o.clone()
                o[..., cols] = new
                return o

            handles.append(proj.register_forward_hook(splice))
        with torch.no_grad():
            logits = self.model(input_ids=self.ids).logits
        for h in handles:
            h.remove()
        return logits


def _logit_diff(logits, position, answer, wrong):
    rows = torch.arange(len(position))
    return float((logits[rows, position, answer] - logits[rows, position, wrong]).mean())


@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2", "gpt_neox", "gemma2"])
def test_every_edge_against_hooks_on_eager(family, monkeypatch):
    # the metric's logits a copy at a time (9 rows a copy here), through the family's own head
    monkeypatch.setattr(resume, "METRIC_ROWS", 4)
    generator = torch.Generator().manual_seed(3)
    batch, length = 3, 9
    clean = torch.randint(3, VOCAB, (batch, length), generator=generator)
    corrupted = clean.clone()
    corrupted[:, :5] = torch.randint(3, VOCAB, (batch, 5), generator=generator)
    position = torch.tensor([8, 6, 7])
    answer = torch.randint(3, VOCAB, (batch,), generator=generator)
    wrong = torch.randint(3, VOCAB, (batch,), generator=generator)

    reference = Reference(family, clean, corrupted)
    clean_value = _logit_diff(reference.clean["logits"], position, answer, wrong)
    patcher = Patcher(
        attach(sharp(family)), clean, corrupted, logit_difference(position, answer, wrong, length)
    )
    assert patcher.clean_value == pytest.approx(clean_value, abs=1e-5)

    edges = patcher.graph.edges[::3]
    assert {(e.input, e.receiver == "logits") for e in edges} == {
        ("q", False),
        ("k", False),
        ("v", False),
        ("in", False),
        ("in", True),
    }
    names = [e.name for e in edges]
    got = patcher.effects(names, chunk=7)
    expected = []
    with torch.no_grad():
        for edge in edges:
            logits = reference.patched_logits(edge.sender, edge.receiver, edge.input)
            expected.append(_logit_diff(logits, position, answer, wrong) - clean_value)
    expected = torch.tensor(expected, dtype=torch.float64)
    scale = float(expected.abs().max())
    assert scale > 1e-3  # the corruption moves the metric through some edges
    assert (got - expected).abs().max() <= 1e-4 * scale + 2e-6, [
        (n, float(g), float(e))
        for n, g, e in zip(names, got, expected, strict=True)
        if abs(g - e) > 1e-4 * scale + 2e-6
    ][:5]
