"""Runs of a transformers-route model that start at a layer, from a residual stream given.

Path patching changes one layer's input and recomputes everything after it; the layers before
are the clean run's. ``Runner.forward(start, hidden, copies)`` runs the model's own forward
(embeddings, masks, rotary tables, final norm, unembedding: the family's code) on ``copies``
copies of the batch stacked on the batch axis, where every block before ``start`` is skipped (it
returns its input: no compute) and block ``start`` receives ``hidden`` (copies * batch, pos,
embed_dim) as its residual stream; with ``start`` = the layer count, ``hidden`` is the last
block's output. Only the metric's positions are unembedded (``logits_to_keep``).

A hook may end a run early by raising ``Stop(value)``: ``forward`` returns the value (the
patching code records a layer's q, k, v this way without running the rest of the model).

``Runner.cache(ids)`` is one full forward that keeps what patching reads: the residual stream
entering each block and leaving the last, each layer's head outputs (the ``head_outputs`` site,
before W_O) and MLP output, and the metric's logits.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from headlab.attention.interventions import intervene, record
from headlab.circuits.blocks import Block, blocks, first_tensor
from headlab.models.hf.adapter import TransformersModel
from headlab.models.hf.block_logits import HFOutputRows

#: (text, position) rows whose logits (and log-softmax) ``Runner.measure`` holds at a time
#: (1024 x 49152 x 4 B = 192 MiB each for SmolLM2).
METRIC_ROWS = 1024


class Stop(Exception):
    """Raised by a hook to end a run; ``Runner.forward`` returns ``value``."""

    def __init__(self, value: object) -> None:
        super().__init__("run stopped by a hook")
        self.value = value


@dataclass
class Cache:
    """One full run. resid: N + 1 tensors (batch, pos, embed_dim), the stream entering block
    0 .. N-1 and leaving block N-1; head_outputs: per layer (batch, head, pos, d_head); mlp: per
    layer (batch, pos, embed_dim) or None; logits: (batch, n_kept, vocab) at the kept
    positions."""

    resid: list[Tensor]
    head_outputs: list[Tensor]
    mlp: list[Tensor | None]
    logits: Tensor


def until_values(attention: nn.Module, seen: dict[str, Tensor]) -> Callable[[ExitStack], None]:
    """Hooks for ``Runner.forward``: keep the layer's q, k and v in ``seen`` as the kernel's
    sites receive them (after the family's projections, norms and rotary) and end the run once
    v is known (``forward`` then returns ``seen``): nothing after the layer's inputs runs."""

    def keep(site: str) -> Callable[[Tensor], None]:
        def fn(t: Tensor) -> None:
            seen[site] = t
            if site == "v":
                raise Stop(seen)

        return fn

    def hooks(stack: ExitStack) -> None:
        for site in ("q", "k", "v"):
            stack.enter_context(intervene(attention, site, keep(site)))

    return hooks


def replaced_output(output: object, value: Tensor) -> object:
    """``output`` (a tensor, or a tuple whose first element is the tensor) with ``value``."""
    if isinstance(output, Tensor):
        return value
    return (value, *output[1:])


class Runner:
    """Forwards of ``model`` on ``ids`` (batch, pos) int64 with ``attention_mask`` (batch, pos)
    (1 on real tokens), unembedding only ``positions`` (n_kept,) int64."""

    def __init__(
        self, model: TransformersModel, ids: Tensor, attention_mask: Tensor, positions: Tensor
    ) -> None:
        self.model = model
        self.blocks: list[Block] = blocks(model)
        self.ids, self.attention_mask, self.positions = ids, attention_mask.long(), positions
        self.device = next(model.model.parameters()).device
        signature = inspect.signature(model.model.forward).parameters
        self._keeps_logits = "logits_to_keep" in signature

    @property
    def batch(self) -> int:
        return self.ids.shape[0]

    def _call(self, ids: Tensor, copies: int, rows: slice | None = None) -> Tensor:
        mask = self.attention_mask
        if rows is not None:  # positions rows.start .. rows.stop - 1 alone (see ``forward``)
            ids, mask = ids[:, rows], mask[:, rows]
        kwargs = {
            "input_ids": ids.repeat(copies, 1).to(self.device),
            "attention_mask": mask.repeat(copies, 1).to(self.device),
            "use_cache": False,
        }
        if rows is not None:
            position = torch.arange(rows.start, rows.stop, device=self.device)
            kwargs["position_ids"] = position[None].expand(kwargs["input_ids"].shape[0], -1)
            if self._keeps_logits:
                kwargs["logits_to_keep"] = 1
            return self.model.model(**kwargs).logits
        if self._keeps_logits:
            kwargs["logits_to_keep"] = self.positions.to(self.device)
            return self.model.model(**kwargs).logits
        return self.model.model(**kwargs).logits[:, self.positions.to(self.device)]

    def _final_states(self, copies: int) -> Tensor:
        """The body's final hidden states (after the family's final norm) at the metric's
        positions: (copies * batch, n_kept, embed_dim); no output head runs."""
        causal_lm = self.model.model
        body = getattr(causal_lm, causal_lm.base_model_prefix)
        out = body(
            input_ids=self.ids.repeat(copies, 1).to(self.device),
            attention_mask=self.attention_mask.repeat(copies, 1).to(self.device),
            use_cache=False,
        )
        return out.last_hidden_state[:, self.positions.to(self.device)]

    def measure(
        self,
        metric: Callable[[Tensor], Tensor],
        start: int,
        hidden: Tensor,
        copies: int,
        hooks: Callable[[ExitStack], None] | None = None,
    ) -> Tensor:
        """``metric`` (logits (c * batch, n_kept, vocab) -> (c,)) of each copy of ``forward``'s
        run, (copies,), the logits made by the family's own output head a few copies at a time
        (``METRIC_ROWS`` rows) from the final states at the kept positions: the logits of
        every copy never exist at once, so a run can stack many copies."""
        with ExitStack() as stack:
            stack.enter_context(_started_at(self.blocks, start, hidden))
            if hooks is not None:
                hooks(stack)
            states = self._final_states(copies)
        per = max(1, METRIC_ROWS // (self.batch * states.shape[1]))
        head = HFOutputRows(self.model.model, states)  # (copies * batch, n_kept, embed_dim)
        values = []
        for c in range(0, copies, per):
            rows = slice(c * self.batch, min(c + per, copies) * self.batch)
            head.states = states[rows]
            values.append(metric(head.logits(slice(None))))
        return torch.cat(values)

    def stream_in(self) -> Tensor:
        """(batch, pos, embed_dim) the residual stream entering block 0 on ``ids`` (the
        family's embeddings, positions included); no block runs."""

        def stop(_module, args):
            raise Stop(args[0].detach())

        with hooked(self.blocks[0].module, "pre", stop), torch.no_grad():
            try:
                self._call(self.ids, 1)
            except Stop as stopped:
                return stopped.value
        raise RuntimeError("the model's forward never reached its first block")

    def cache(self, ids: Tensor) -> Cache:
        """One full run of ``ids`` (batch, pos) with everything patching reads kept."""
        n = len(self.blocks)
        resid: list[Tensor | None] = [None] * (n + 1)
        mlp: list[Tensor | None] = [None] * n
        with ExitStack() as stack, torch.no_grad():
            for block in self.blocks:
                stack.enter_context(hooked(block.module, "pre", _keep(resid, block.index)))
                if block.mlp is not None:
                    stack.enter_context(hooked(block.mlp, "post", _keep_output(mlp, block.index)))
            stack.enter_context(hooked(self.blocks[-1].module, "post", _keep_output(resid, n)))
            recordings = [
                stack.enter_context(record(b.attention, ["head_outputs"])) for b in self.blocks
            ]
            logits = self._call(ids, 1)
        heads = [r["head_outputs"] for r in recordings]
        return Cache([r for r in resid], heads, mlp, logits.detach())

    def forward(
        self,
        start: int,
        hidden: Tensor,
        copies: int,
        hooks: Callable[[ExitStack], None] | None = None,
        rows: slice | None = None,
    ) -> object:
        """The logits (copies * batch, n_kept, vocab) of the run described in the module
        docstring, or the value of a hook's ``Stop``. ``hooks(stack)`` enters the run's
        interventions into ``stack``; they are removed when the run ends.

        ``rows``: run the positions rows.start .. rows.stop - 1 alone (their own position ids,
        ``hidden`` (copies * batch, rows, embed_dim)), for the maps that act on each position
        alone (a block's norm and projections up to q, k, v; its MLP with the heads held): a
        hook stops the run before anything that mixes positions counts."""
        with ExitStack() as stack:
            stack.enter_context(_started_at(self.blocks, start, hidden))
            if hooks is not None:
                hooks(stack)
            try:
                return self._call(self.ids, copies, rows)
            except Stop as stop:
                return stop.value


def _keep(store: list, index: int):
    def hook(_module, args):
        store[index] = args[0].detach()

    return hook


def _keep_output(store: list, index: int):
    def hook(_module, _args, output):
        store[index] = first_tensor(output).detach()

    return hook


@contextmanager
def hooked(module: nn.Module, when: str, fn) -> Iterator[None]:
    """``fn`` as a forward pre-hook ("pre") or forward hook ("post") within the block."""
    if when == "pre":
        handle = module.register_forward_pre_hook(fn)
    else:
        handle = module.register_forward_hook(fn)
    try:
        yield
    finally:
        handle.remove()




@contextmanager
def _started_at(blocks_: list[Block], start: int, hidden: Tensor) -> Iterator[None]:
    """Blocks before ``start`` skipped; block ``start`` (or the model's end) sees ``hidden``."""
    skipped = [b.module for b in blocks_[:start]]

    def passes(h, *_args, **_kwargs):
        return h

    def gives(_h, *_args, **_kwargs):
        return hidden

    for module in skipped[:-1]:
        module.forward = passes
    if skipped:
        skipped[-1].forward = gives
    handle = None
    if start == 0:
        handle = blocks_[0].module.register_forward_pre_hook(
            lambda _m, args: (hidden, *args[1:])
        )
    try:
        yield
    finally:
        for module in skipped:
            del module.forward
        if handle is not None:
            handle.remove()


__all__ = ["Cache", "Runner", "Stop", "hooked", "replaced_output"]
