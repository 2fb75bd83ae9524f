"""A third model family made of ``HeadModel`` alone, for the conformance tests (tests/heads).

``Toy`` is a tiny language model or sentence encoder written for the tests: its own attention
module (not headlab's ``MultiHeadAttention``; it calls the kernel, as any family behind
headlab's registered transformers function does), its own tokenizer (whitespace words), its own
views and edits. It implements the interface and nothing more, so that each analysis that runs
on it uses nothing but the interface. Variants: grouped K/V heads (``kv_heads``), causal or
not, and the three objective kinds ("next-token": logits; "contrastive": mean-pooled sentence
embeddings; "none": hidden states and no objective).

It also implements the run protocol (``headlab.models.run_protocol``): its blocks (attention,
and with ``mlp=True`` a two-layer MLP reading the attention's output, or the block's input with
``parallel=True``) apply their sites, and ``run_blocks`` starts, stops and keeps as the protocol
says, so that the circuits (path patching, EAP, composition) run on it too.
"""

from __future__ import annotations

import copy
import dataclasses
from contextlib import ExitStack

import torch
from torch import Tensor, nn

from headlab.attention.functional import merge_heads
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sites import BLOCK_SITES, Sites
from headlab.models.interface import AttentionLayer, HeadMask, TokenBatch, layer_masks
from headlab.models.objectives import contrastive_objective, next_token_loss
from headlab.models.run_protocol import (
    Block,
    Stream,
    check_start,
    given_stream,
    stopped_run,
)

E, H, D, LAYERS, VOCAB = 14, 4, 5, 2, 29  # distinct sizes; H * D = 20 != E
HIDDEN = 11  # the MLP's width


def _linear(weight: Tensor) -> nn.Linear:
    """A bias-free Linear holding a copy of ``weight`` (out, in), also with no rows."""
    lin = nn.Linear(1, 1, bias=False)
    lin.weight = nn.Parameter(weight.detach().clone())
    lin.out_features, lin.in_features = weight.shape
    return lin


class ToyAttention(nn.Module):
    """Self-attention with separate q/k/v/o maps (k and v: fewer heads with GQA), causal or
    not, through headlab's kernel; ``view``: the query heads viewed as that many."""

    def __init__(
        self, q: nn.Linear, k: nn.Linear, v: nn.Linear, o: nn.Linear, view=None, causal=True
    ):
        super().__init__()
        self.q, self.k, self.v, self.o = q, k, v, o
        heads, kv_heads = q.out_features // D, k.out_features // D
        self.num_heads = heads if view is None else view
        self.num_kv_heads = kv_heads if view is None else min(view, kv_heads)
        self.head_dim = D if view is None else D * heads // view
        self.embed_dim = E
        self.view = view
        self.causal = causal
        self.sites = Sites()

    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        if self.view is not None:
            raise ValueError("a view has no weights of its own")
        return self.q.weight, self.k.weight

    def value_output_weights(self) -> tuple[Tensor, Tensor]:
        if self.view is not None:
            raise ValueError("a view has no weights of its own")
        return self.v.weight, self.o.weight

    def input_scale(self) -> None:  # no norm in front of the attention
        return None

    def output_weight(self) -> Tensor | None:
        return self.o.weight if self.view is None else None

    def forward(self, x: Tensor, padding: Tensor, scale: Tensor | None) -> Tensor:
        batch, pos, _ = x.shape
        heads = self.q.out_features // D
        if heads == 0:  # every head removed
            return torch.zeros_like(x)

        def split(t: Tensor) -> Tensor:
            return t.view(batch, pos, -1, D).transpose(1, 2)  # (batch, head|kv_head, pos, D)

        statistics = self.sites.statistics
        if statistics is not None:
            statistics = dataclasses.replace(statistics, output_weight=self.o.weight)
        options = AttendOptions(
            sites=self.sites,
            head_scale=None if scale is None else scale.view(-1, heads, 1, 1),
            head_view=self.view,
            statistics=statistics,
        )
        mask = MaskSpec(causal=self.causal, key_padding=padding)
        run = attend(split(self.q(x)), split(self.k(x)), split(self.v(x)), mask, options)
        return self.o(merge_heads(run.head_out))


class ToyRows:
    """The toy's ``OutputRows``: final states (batch, pos, E), tied logits on request."""

    def __init__(self, states: Tensor, embed: Tensor) -> None:
        self.states, self.embed = states, embed
        self.num_positions = states.shape[1]

    def logits(self, rows: slice) -> Tensor:
        return self.states[:, rows] @ self.embed.T  # (batch, rows, vocab)


class ToyMLP(nn.Module):
    """x -> W_2 tanh(W_1 x + b_1) + b_2."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(E, HIDDEN), nn.Linear(HIDDEN, E)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(torch.tanh(self.up(x)))


class Toy:
    """Embeddings, residual blocks (attention, and an MLP with ``mlps``), then
    (``objective_kind``) tied next-token logits, mean-pooled sentence embeddings or the hidden
    states. Whitespace words."""

    name = "toy"
    first_token = "start"
    max_positions = 40

    def __init__(
        self,
        layers: list[ToyAttention],
        embed: nn.Embedding,
        causal: bool = True,
        objective_kind: str = "next-token",
        mlps: list[ToyMLP] | None = None,
        parallel: bool = False,
    ) -> None:
        self.layers, self.embed = layers, embed
        self.causal, self.objective_kind = causal, objective_kind
        self.output_width = VOCAB if objective_kind == "next-token" else E
        self.mlps, self.parallel = mlps, parallel
        self._blocks = [
            Block(
                i,
                "decoder" if causal else "encoder",
                a,
                Sites(BLOCK_SITES),
                mlps is not None,
                parallel,
            )
            for i, a in enumerate(layers)
        ]

    @classmethod
    def build(
        cls,
        seed: int = 0,
        *,
        kv_heads: int = H,
        causal: bool = True,
        objective_kind: str = "next-token",
        mlp: bool = False,
        parallel: bool = False,
    ) -> Toy:
        torch.manual_seed(seed)

        def linear(i, o):
            return nn.Linear(i, o, bias=False)

        def layer() -> ToyAttention:
            q, k, v = linear(E, H * D), linear(E, kv_heads * D), linear(E, kv_heads * D)
            return ToyAttention(q, k, v, linear(H * D, E), causal=causal)

        layers = [layer() for _ in range(LAYERS)]
        mlps = [ToyMLP() for _ in range(LAYERS)] if mlp else None
        return cls(layers, nn.Embedding(VOCAB, E), causal, objective_kind, mlps, parallel)

    # -------------------------------------------------------------- the interface
    num_layers = property(lambda self: len(self.layers))
    heads_per_layer = property(lambda self: [a.num_heads for a in self.layers])
    kv_heads_per_layer = property(lambda self: [a.num_kv_heads for a in self.layers])

    def parameters(self):
        seen = {}
        for module in (self.embed, *self.layers, *(self.mlps or ())):
            for p in module.parameters():
                seen[id(p)] = p
        return iter(seen.values())

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def attention_layers(self) -> list[AttentionLayer]:
        return self.layers

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        limit = max_length or self.max_positions
        if not 1 <= limit <= self.max_positions:
            raise ValueError(f"max_length must be between 1 and {self.max_positions}")
        words = [t.split()[:limit] for t in texts]
        pos = max(len(w) for w in words)
        ids = torch.zeros(len(texts), pos, dtype=torch.long)
        mask = torch.zeros(len(texts), pos, dtype=torch.bool)
        for row, w in enumerate(words):
            ids[row, : len(w)] = torch.tensor([sum(map(ord, x)) % VOCAB for x in w])
            mask[row, : len(w)] = True
        return TokenBatch(ids, mask, words)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _block(self, i: int, x: Tensor, padding: Tensor, scale: Tensor | None) -> Tensor:
        """Block i on its resid_in x (batch, pos, E), its sites applied."""
        sites = self._blocks[i].sites
        x = sites("resid_in", x)
        out = x + self.layers[i](x, padding, scale)
        if self.mlps is not None:
            m = sites("mlp_out", self.mlps[i](sites("mlp_in", x if self.parallel else out)))
            out = out + m
        return sites("resid_out", out)

    def _body(self, batch: TokenBatch, head_mask: HeadMask) -> Tensor:
        x = self.embed(batch.input_ids)
        for i, scale in enumerate(layer_masks(head_mask, self.num_layers)):
            x = self._block(i, x, ~batch.attention_mask, scale)
        return x  # (batch, pos, E)

    # -------------------------------------------------------------- the run protocol
    def streams(self) -> list[Stream]:
        return [Stream("decoder" if self.causal else "encoder", "text")]

    def blocks(self) -> list[Block]:
        return self._blocks

    def run_blocks(
        self,
        batch,
        *,
        start=0,
        hidden=None,
        copies=1,
        stop=None,
        rows=None,
        keep=None,
        interventions=None,
        sources=None,
    ) -> Tensor:
        check_start(self._blocks, start, hidden)
        ids, mask = batch.input_ids, batch.attention_mask
        if rows is not None:
            ids, mask = ids[:, rows], mask[:, rows]
        ids, padding = ids.repeat(copies, 1), ~mask.repeat(copies, 1)

        def call() -> Tensor:
            x = self.embed(ids) if start == 0 else hidden
            for i in range(start, self.num_layers):
                x = self._block(i, x, padding, None)
            if start == self.num_layers:
                x = self._blocks[-1].sites("resid_out", x)
            return x if keep is None else x[:, keep]

        with ExitStack() as stack:
            given_stream(self._blocks, start, hidden)(stack)
            if interventions is not None:
                interventions(stack)
            return stopped_run(self._blocks, stop, call)

    def unembed(self, states: Tensor) -> Tensor:
        return states @ self.embed.weight.T  # (..., pos, vocab)

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        x = self._body(batch, head_mask)
        if self.objective_kind == "next-token":
            return x @ self.embed.weight.T  # (batch, pos, vocab)
        if self.objective_kind == "contrastive":
            real = batch.attention_mask[..., None].to(x.dtype)
            return (x * real).sum(1) / real.sum(1)  # (batch, E)
        return x  # (batch, pos, E)

    def run_rows(self, batch: TokenBatch, head_mask: HeadMask = None) -> ToyRows:
        if self.objective_kind != "next-token":
            raise ValueError(f"the toy's objective is {self.objective_kind!r}, not next-token")
        return ToyRows(self._body(batch, head_mask), self.embed.weight)

    def objective(self, texts, head_mask=None, max_length=None) -> Tensor:
        if self.objective_kind == "contrastive":
            return contrastive_objective(
                self, texts, head_mask, max_length=max_length or self.max_positions
            )
        if self.objective_kind == "none":
            raise ValueError("the toy has no objective (objective_kind 'none')")
        batch = self.tokenize(texts, max_length)
        return next_token_loss(self.run(batch, head_mask), batch)

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        return {
            "start": torch.zeros(len(batch.tokens), dtype=torch.long),
            "last": batch.attention_mask.sum(dim=1) - 1,
        }

    def _with(self, replace: dict[int, ToyAttention]) -> Toy:
        layers = [replace.get(i, a) for i, a in enumerate(self.layers)]
        return Toy(layers, self.embed, self.causal, self.objective_kind, self.mlps, self.parallel)

    def with_head_view(self, num_heads, layers=None) -> Toy:
        chosen = range(self.num_layers) if layers is None else layers
        if any(H % num_heads for _ in chosen):
            raise ValueError(f"num_heads must divide {H}, got {num_heads}")
        a = self.layers
        return self._with(
            {
                i: ToyAttention(a[i].q, a[i].k, a[i].v, a[i].o, num_heads, causal=self.causal)
                for i in chosen
            }
        )

    def without_heads(self, heads) -> Toy:
        """Each kept query head keeps its rows of W_Q and W_O and (with GQA) a copy of its
        group's K/V rows, so that kept heads need not split evenly over the kept groups."""
        replace = {}
        for i, removed in heads.items():
            old = self.layers[i]
            keep = [h for h in range(old.num_heads) if h not in set(removed)]
            group = old.num_heads // old.num_kv_heads
            rows = [r for h in keep for r in range(h * D, (h + 1) * D)]
            kv_rows = [r for h in keep for r in range(h // group * D, (h // group + 1) * D)]
            new = ToyAttention(
                _linear(old.q.weight[rows]),
                *(_linear(getattr(old, name).weight[kv_rows]) for name in ("k", "v")),
                _linear(old.o.weight[:, rows]),
                causal=self.causal,
            )
            replace[i] = new
        return self._with(replace)

    def with_query_key_weights(self, weights) -> Toy:
        replace = {}
        for i, (w_q, w_k) in weights.items():
            new = copy.deepcopy(self.layers[i])
            with torch.no_grad():
                new.q.weight.copy_(w_q)
                new.k.weight.copy_(w_k)
            new.sites = Sites()
            replace[i] = new
        return self._with(replace)
