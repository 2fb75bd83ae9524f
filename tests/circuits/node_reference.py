"""An outside reference for node attribution and the patching sweep: transformers' own model
in float64 with forward hooks (no headlab code), on the tiny random families of
tests/models/hf_families.py (as test_path_patching's ``sharp``: matrices scaled up).

A node's output is moved to ``clean + s (corrupted - clean)`` where transformers computes it:
a head's columns of the output projection's input (before W_O), a K/V group's columns of the key
and value projections' outputs (before rotary, which acts on each position alone: the same
change as at the rotated keys), an MLP's output. ``s = 1`` is the exact patch; its derivative at
``s = 0`` is what node attribution estimates.
"""

from __future__ import annotations

import torch
from hf_families import VOCAB
from test_path_patching import sharp

from headlab.circuits.metrics import logit_difference

PARTS = {
    "llama": {
        "blocks": "model.layers",
        "o": "self_attn.o_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
    },
    "gpt2": {"blocks": "transformer.h", "o": "attn.c_proj"},
}


def float64_model(family: str):
    """``sharp(family)`` in float64 throughout: Llama's RMSNorm computes in float32 whatever its
    input (transformers' choice), whose rounding would hide the finite differences' slopes; here
    it computes in its input's dtype (the same formula), in the reference and in headlab's run."""
    model = sharp(family).double()
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):

            def forward(x, module=module):
                scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
                return module.weight * (x * scale)

            module.forward = forward
    return model


def task(seed: int = 3, batch: int = 3, length: int = 9):
    """Clean ids, corrupted ids (the first 5 tokens redrawn) and the logit-difference metric's
    (positions, answers, wrong answers) with the metric itself."""
    generator = torch.Generator().manual_seed(seed)
    clean = torch.randint(3, VOCAB, (batch, length), generator=generator)
    corrupted = clean.clone()
    corrupted[:, :5] = torch.randint(3, VOCAB, (batch, 5), generator=generator)
    position = torch.tensor([length - 1, length - 3, length - 2])[:batch]
    answer = torch.randint(3, VOCAB, (batch,), generator=generator)
    wrong = torch.randint(3, VOCAB, (batch,), generator=generator)
    return (
        clean,
        corrupted,
        (position, answer, wrong),
        logit_difference(position, answer, wrong, length),
    )


class EagerNodes:
    """The eager model of ``family`` in float64, with the clean and corrupted runs' node outputs
    recorded (``float64_model``)."""

    def __init__(self, family: str, clean, corrupted, targets) -> None:
        self.model = float64_model(family)
        self.model.set_attn_implementation("sdpa")  # in float64 (eager takes softmax in float32)
        self.parts = PARTS[family]
        self.blocks = self.model.get_submodule(self.parts["blocks"])
        config = self.model.config
        self.d_head = getattr(config, "head_dim", None) or config.hidden_size // (
            config.num_attention_heads
        )
        self.ids, self.targets = clean, targets
        self.clean, self.corrupted = self._record(clean), self._record(corrupted)

    def _modules(self, layer: int) -> dict:
        block = self.blocks[layer]
        found = {"o": block.get_submodule(self.parts["o"]), "mlp": block.mlp}
        for key in ("k", "v"):
            if key in self.parts:
                found[key] = block.get_submodule(self.parts[key])
        return found

    def _record(self, ids) -> dict:
        seen: dict = {}
        handles = []
        for layer in range(len(self.blocks)):
            for key, module in self._modules(layer).items():
                if key == "o":
                    hook = lambda m, a, key=(layer, key): seen.__setitem__(key, a[0])  # noqa: E731
                    handles.append(module.register_forward_pre_hook(hook))
                else:
                    hook = lambda m, a, o, key=(layer, key): seen.__setitem__(key, o)  # noqa: E731
                    handles.append(module.register_forward_hook(hook))
        with torch.no_grad():
            self.model(input_ids=ids)
        for handle in handles:
            handle.remove()
        return seen

    def metric(self, logits) -> float:
        position, answer, wrong = self.targets
        rows = torch.arange(len(position))
        picked = logits[rows, position]
        return float((picked[rows, answer] - picked[rows, wrong]).mean())

    def value(self, node: str | None = None, s: float = 1.0, pos: int | None = None) -> float:
        """The metric with ``node`` ("L.H", "L.gG", "mlp.L"; None: the clean run) moved to
        clean + s (corrupted - clean), at position ``pos`` alone (None: every position)."""
        handles = []
        at = slice(None) if pos is None else slice(pos, pos + 1)

        def moved(key, columns):
            clean, corrupted = self.clean[key], self.corrupted[key]
            out = clean.clone()
            out[:, at, columns] = clean[:, at, columns] + s * (
                corrupted[:, at, columns] - clean[:, at, columns]
            )
            return out

        if node is not None:
            layer_text, _, index_text = node.partition(".")
            if layer_text == "mlp":
                layer = int(index_text)
                new = moved((layer, "mlp"), slice(None))
                handles.append(
                    self._modules(layer)["mlp"].register_forward_hook(lambda m, a, o: new)
                )
            else:
                layer, group = int(layer_text), index_text.startswith("g")
                index = int(index_text.lstrip("g"))
                columns = slice(index * self.d_head, (index + 1) * self.d_head)
                modules = self._modules(layer)
                for key in ("k", "v") if group else ("o",):
                    new = moved((layer, key), columns)
                    if key == "o":
                        handles.append(
                            modules[key].register_forward_pre_hook(lambda m, a, new=new: (new,))
                        )
                    else:
                        handles.append(
                            modules[key].register_forward_hook(lambda m, a, o, new=new: new)
                        )
        with torch.no_grad():
            logits = self.model(input_ids=self.ids).logits
        for handle in handles:
            handle.remove()
        return self.metric(logits)
