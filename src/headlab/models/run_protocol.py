"""The run as a protocol: a model's streams, its blocks and their sites, and runs between them.

The analyses that follow the residual stream (``circuits``, and any analysis that patches a
block's input or output) ask a model for this and nothing else; every model kind implements it
once, in ``models/`` (the transformers route in ``models/hf/block_run.py``; the tests' toy family
in tests/toy_family.py and their toy encoder-decoder, with two streams, in tests/toy_seq2seq.py).
Shapes use ``batch, pos, head, kv_head, d_head, d_model``.

Streams (``Stream``): the token sequences a model's residual streams run over. A decoder or an
encoder has one ("text"); an encoder-decoder two (its encoder's and its decoder's); a vision
model one over patches ("patches"), whose special positions (its CLS token, its registers) are
named in ``named_positions``. A stream whose final states another stream reads names the norm
that sits after its last block, in no block (``Stream.final_norm``, role "final": T5's and
Whisper's encoder), so that its scale, too, can be held.

Blocks (``Block``), in the order a run reaches them (an encoder-decoder's encoder blocks first),
each with its sites, all reached by one ``headlab.attention.interventions.intervene``:

    block.sites            resid_in, mlp_in, mlp_out, resid_out   (batch, pos, d_model)
    block.attention.sites  q, k, v, scores, weights, head_outputs  (every head's output before
                           W_O: (batch, head, pos, d_head))
    block.cross_attention  the cross-attention of an encoder-decoder's decoder block (None
                           elsewhere): the same sites; its key and value inputs read the final
                           states of the stream ``block.reads``

Each block also names its norms outside its MLP (``Block.norms``: ``BlockNorm``, by ``role``),
each with the site ``scale`` (``NORM_SITES``: one over each row's scale, (..., 1)); replacing
it holds the norm at given scales, which makes it affine in its input (circuits/frozen_norms.py).

The attention's query, key and value inputs are the sites q, k, v (after the family's norm,
projections, QK-norm and rotary); the stream they are made from is the block's resid_in (or,
for a parallel block, the same stream its MLP reads).

Runs (``RunnableModel.run_blocks``): from block ``start`` with ``hidden`` (copies * batch, pos,
d_model) as its resid_in (the blocks before it skipped: no compute), on ``copies`` copies of a
batch stacked on the batch axis, with interventions entered by a callback, until ``stop`` (a
``StopAt``: the run returns the tensor at that site, after the interventions there) or the end
(the final states, after the family's final norm, at the positions ``keep``). ``unembed`` makes
logits from final states with the model's own output head. ``cache`` (here, for every model
kind) keeps one whole run's stream, head outputs and MLP outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from headlab.attention.interventions import intervene
from headlab.attention.sites import BLOCK_SITES, NORM_SITES, SITES, Sites
from headlab.models.interface import AttentionLayer, TokenBatch

#: What a stream runs over: text tokens, image patches, audio frames.
STREAM_KINDS = ("text", "patches", "audio")
#: Interventions entered into the run's ExitStack (removed when the run ends).
Interventions = Callable[[ExitStack], None]
#: A run's input: the batch of its one stream, or one batch per stream (stream name -> batch).
Inputs = TokenBatch | Mapping[str, TokenBatch]


@dataclass(frozen=True)
class Stream:
    """One residual stream: ``name`` ("decoder", "encoder", "patches"...), ``kind`` (one of
    ``STREAM_KINDS``) and the names of its special positions (a vision model's "cls",
    "register"); the model says where they are for an input."""

    name: str
    kind: str
    named_positions: tuple[str, ...] = ()
    #: the norm after the stream's last block (``BlockNorm``, role "final"), where another
    #: stream reads its final states; None where it has none (BART) or none is read
    final_norm: BlockNorm | None = field(default=None, compare=False)
    #: the norm between the stream's embeddings and its first block (``BlockNorm``, role
    #: "embed": CLIP's vision tower's ``pre_layrnorm``); None where it has none
    embedding_norm: BlockNorm | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.final_norm is not None and self.final_norm.role != "final":
            raise ValueError(
                f"a stream's final norm has the role final, got {self.final_norm.role!r}"
            )
        if self.embedding_norm is not None and self.embedding_norm.role != "embed":
            raise ValueError(
                f"a stream's embedding norm has the role embed, got {self.embedding_norm.role!r}"
            )
        if self.kind not in STREAM_KINDS:
            raise ValueError(
                f"a stream's kind is one of {', '.join(STREAM_KINDS)}, got {self.kind!r}"
            )


#: Where a block's norm sits: in front of its attention (the one its q, k, v inputs are made
#: from), inside the attention (a QK-norm), the same two for the cross-attention, or elsewhere
#: in the block outside its MLP (post-norms, the norm in front of the MLP); "final": a stream's
#: norm after its last block (``Stream.final_norm``), in no block; "embed": a stream's norm
#: between its embeddings and its first block (``Stream.embedding_norm``: CLIP's vision tower).
NORM_ROLES = ("attention_in", "qk", "cross_in", "cross_qk", "block", "final", "embed")


@runtime_checkable
class BlockNorm(Protocol):
    """A norm n(x) = g * C(x) / s(x) + b of a block (C: a LayerNorm's centring, or none; one s
    per row of its input's last axis): its ``role`` (``NORM_ROLES``) and its ``sites``
    (``NORM_SITES``: "scale", 1/s (..., 1), reached by ``intervene``)."""

    role: str
    sites: Sites

    def form(self) -> tuple[Tensor, Tensor]:
        """The norm's g and b, each (width,)."""
        ...

    def held(self, x: Tensor) -> tuple[bool, Tensor]:
        """Whether the norm centres, and 1/s (..., 1) for each row of ``x`` (..., width), read
        from the norm's own output on ``x`` (so that its epsilon and form need no knowing)."""
        ...


@runtime_checkable
class BlockAttention(AttentionLayer, Protocol):
    """A block's attention: the interface's ``AttentionLayer`` and its heads' output projection."""

    def output_weight(self) -> Tensor | None:
        """W_O (d_model, num_heads * head_dim), or None where no one projection takes the heads'
        output unchanged to the block."""
        ...


@dataclass(frozen=True, eq=False)
class Block:
    """Block ``index`` (in run order) of stream ``stream``: its ``attention``, its own ``sites``
    (``BLOCK_SITES``), whether it has an MLP and whether the MLP reads the block's input
    (``parallel``: GPT-NeoX, GPT-J) rather than the attention's output; an encoder-decoder's
    decoder block also has ``cross_attention``, whose key and value inputs read the final states
    of stream ``reads``. ``norms``: the block's norms outside its MLP (``BlockNorm``; empty for
    a model that names none)."""

    index: int
    stream: str
    attention: BlockAttention
    sites: Sites
    has_mlp: bool
    parallel: bool
    cross_attention: BlockAttention | None = None
    reads: str | None = None
    norms: tuple[BlockNorm, ...] = ()

    def __post_init__(self) -> None:
        if self.sites.names != BLOCK_SITES:
            raise ValueError(f"a block's sites are {BLOCK_SITES}, got {self.sites.names}")
        for norm in self.norms:
            if norm.role not in NORM_ROLES or norm.sites.names != NORM_SITES:
                raise ValueError(
                    f"a block's norm has a role of {NORM_ROLES} and the sites {NORM_SITES}, "
                    f"got {norm.role!r} and {norm.sites.names}"
                )
        if (self.cross_attention is None) != (self.reads is None):
            raise ValueError("a block's cross-attention and the stream it reads go together")


@dataclass(frozen=True)
class StopAt:
    """Where a run ends: ``site`` of block ``block`` (a ``BLOCK_SITES`` name, or an attention
    site of its attention, or of its cross-attention with ``cross``)."""

    block: int
    site: str
    cross: bool = False

    def __post_init__(self) -> None:
        names = SITES if self.cross or self.site not in BLOCK_SITES else BLOCK_SITES
        if self.site not in names:
            raise ValueError(
                f"a run stops at one of {', '.join(BLOCK_SITES + SITES)}, got {self.site!r}"
            )


@runtime_checkable
class RunnableModel(Protocol):
    """What a model offers the analyses of the residual stream (module docstring)."""

    name: str

    @property
    def output_width(self) -> int: ...

    def streams(self) -> Sequence[Stream]:
        """The model's streams, in run order."""
        ...

    def blocks(self) -> Sequence[Block]:
        """Every block, in run order (the same objects on every call). ValueError (one line,
        naming what is missing) for a model whose blocks cannot be read."""
        ...

    def run_blocks(
        self,
        batch: Inputs,
        *,
        start: int = 0,
        hidden: Tensor | None = None,
        copies: int = 1,
        stop: StopAt | None = None,
        rows: slice | Tensor | None = None,
        keep: Tensor | None = None,
        interventions: Interventions | None = None,
        sources: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        """One run of ``copies`` copies of ``batch`` (module docstring; a model with several
        streams takes one batch per stream, by name). hidden: the resid_in of
        block ``start`` (copies * batch, pos, d_model), or with ``start`` = the block count the
        stream leaving the last block; None: the model's own embeddings. rows: only the
        positions rows.start .. rows.stop - 1, at their own positions (for the maps that act on
        each position alone: a block up to its q, k, v, or its MLP with the heads held); the
        transformers route also takes (n,) ascending positions (its context runs:
        ``models/hf/context_run.py``, whose heads read a whole run's keys and values). keep:
        (n_kept,) the positions whose final states are returned (default all). sources: the
        states leaving the last block of each other stream a cross-attention reads, when the
        run starts past them (``RunCache.streams_out``; the model applies that stream's final
        norm, where it has one, before its cross-attention reads them). Returns the tensor at
        ``stop``, else the final states (copies * batch, n_kept,
        d_model)."""
        ...

    def unembed(self, states: Tensor) -> Tensor:
        """(..., pos, d_model) final states -> (..., pos, output_width) logits, through the
        model's own output head."""
        ...


class _Stopped(Exception):
    """Ends a run at its ``StopAt`` (private to the implementations of ``run_blocks``)."""

    def __init__(self, value: Tensor) -> None:
        super().__init__("the run reached its stop")
        self.value = value


def _raise(t: Tensor) -> None:
    raise _Stopped(t)


def stop_target(blocks: Sequence[Block], stop: StopAt) -> object:
    """The block, attention or cross-attention whose sites hold ``stop``'s site."""
    block = blocks[stop.block]
    if stop.cross:
        if block.cross_attention is None:
            raise ValueError(f"block {stop.block} has no cross-attention")
        return block.cross_attention
    return block if stop.site in BLOCK_SITES else block.attention


def stopped_run(blocks: Sequence[Block], stop: StopAt | None, call: Callable[[], Tensor]) -> Tensor:
    """``call()`` (a model's forward), or, with ``stop``, the tensor at the stop's site: the
    stop is entered after every other intervention at that site, so the tensor is theirs."""
    if stop is None:
        return call()
    with intervene(stop_target(blocks, stop), stop.site, _raise):
        try:
            call()
        except _Stopped as stopped:
            return stopped.value
    raise RuntimeError(f"the run ended before block {stop.block}'s {stop.site}")


def given_stream(blocks: Sequence[Block], start: int, hidden: Tensor | None) -> Interventions:
    """Interventions that hand ``hidden`` to block ``start`` as its resid_in (before any other
    intervention there), or with ``start`` = the block count, as the last block's resid_out."""

    def enter(stack: ExitStack) -> None:
        if hidden is None:
            return
        if start < len(blocks):
            stack.enter_context(intervene(blocks[start], "resid_in", lambda t: hidden, True))
        else:
            stack.enter_context(intervene(blocks[-1], "resid_out", lambda t: hidden, True))

    return enter


def check_start(blocks: Sequence[Block], start: int, hidden: Tensor | None) -> None:
    if not 0 <= start <= len(blocks):
        raise ValueError(f"start must be a block, 0..{len(blocks)}, got {start}")
    if start > 0 and hidden is None:
        raise ValueError(f"a run from block {start} needs its residual stream (hidden)")


@dataclass
class RunCache:
    """One whole run (``cache``): resid, the stream entering each block and leaving the last
    (blocks + 1 tensors (batch, pos, d_model)); head_outputs, per block (batch, head, pos,
    d_head); mlp, per block (batch, pos, d_model) or None; final, the final states at the kept
    positions (batch, n_kept, d_model); streams_out: each stream's states leaving its last block
    (what a cross-attention of a later stream reads: ``run_blocks``' ``sources``); cross_outputs:
    per block, its cross-attention's head outputs (batch, head, q_pos, d_head), or None."""

    resid: list[Tensor]
    head_outputs: list[Tensor]
    mlp: list[Tensor | None]
    final: Tensor
    streams_out: dict[str, Tensor]
    cross_outputs: list[Tensor | None] = field(default_factory=list)


def cache(model: RunnableModel, batch: Inputs, keep: Tensor | None = None) -> RunCache:
    """One whole run of ``batch`` without autograd, keeping what ``RunCache`` holds."""
    blocks = model.blocks()
    n = len(blocks)
    resid: list = [None] * (n + 1)
    heads: list = [None] * n
    mlp: list = [None] * n
    cross: list = [None] * n
    streams_out: dict[str, Tensor] = {}
    last = {block.stream: block for block in blocks}  # each stream's last block

    def keeping(stack: ExitStack) -> None:
        for block in blocks:
            i = block.index
            stack.enter_context(intervene(block, "resid_in", _into(resid, i)))
            stack.enter_context(intervene(block.attention, "head_outputs", _into(heads, i)))
            if block.has_mlp:
                stack.enter_context(intervene(block, "mlp_out", _into(mlp, i)))
            if block.cross_attention is not None:
                stack.enter_context(
                    intervene(block.cross_attention, "head_outputs", _into(cross, i))
                )
        stack.enter_context(intervene(blocks[-1], "resid_out", _into(resid, n)))
        for name, block in last.items():
            keep_out = lambda t, name=name: streams_out.__setitem__(name, t.detach())  # noqa: E731
            stack.enter_context(intervene(block, "resid_out", keep_out))

    with torch.no_grad():
        final = model.run_blocks(batch, keep=keep, interventions=keeping)
    return RunCache(resid, heads, mlp, final, streams_out, cross)


@contextmanager
def kept_outputs(modules: Sequence[nn.Module], store: dict, keys: Sequence) -> Iterator[None]:
    """Within the block, each of ``modules``' outputs (the first tensor where it returns a
    tuple) goes to ``store[keys[j]]`` with its autograd graph: the outputs of the projections a
    model's attention layer declares (the transformers route's ``HFAttentionLayer.query`` ...),
    which the sliced receiver gradients of circuits read."""

    def keep(key):
        def hook(_module, _args, output):
            store[key] = output if isinstance(output, Tensor) else output[0]

        return hook

    handles = [m.register_forward_hook(keep(k)) for m, k in zip(modules, keys, strict=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _into(store: list, index: int) -> Callable[[Tensor], None]:
    def keep(t: Tensor) -> None:
        store[index] = t.detach()

    return keep


__all__ = [
    "NORM_ROLES",
    "STREAM_KINDS",
    "Block",
    "BlockAttention",
    "BlockNorm",
    "Inputs",
    "Interventions",
    "RunCache",
    "RunnableModel",
    "StopAt",
    "Stream",
    "cache",
    "check_start",
    "given_stream",
    "kept_outputs",
    "stop_target",
    "stopped_run",
]
