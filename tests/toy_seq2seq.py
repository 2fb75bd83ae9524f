"""A toy encoder-decoder made of the run protocol alone (``headlab.models.run_protocol``), for the
protocol's tests: two streams, "encoder" (non-causal self-attention and an MLP per block) and
"decoder" (causal self-attention, cross-attention whose key and value inputs read the encoder's
final states, and an MLP per block). Everything goes through headlab's kernel and the blocks'
sites, as any model kind behind the protocol does; sizes are those of tests/toy_family.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack

import torch
from torch import Tensor, nn

from headlab.attention.functional import merge_heads
from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sites import BLOCK_SITES, Sites
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import Block, Stream, check_start, given_stream, stopped_run
from toy_family import VOCAB, D, E, H, ToyAttention, ToyMLP

ENCODER, DECODER = 2, 2  # blocks of each stream


class ToyCrossAttention(ToyAttention):
    """Queries from the decoder's stream, keys and values from the encoder's final states."""

    def forward(self, x: Tensor, memory: Tensor, memory_padding: Tensor) -> Tensor:
        def split(t: Tensor) -> Tensor:
            return t.view(t.shape[0], t.shape[1], -1, D).transpose(1, 2)

        options = AttendOptions(sites=self.sites)
        mask = MaskSpec(causal=False, key_padding=memory_padding)
        run = attend(split(self.q(x)), split(self.k(memory)), split(self.v(memory)), mask, options)
        return self.o(merge_heads(run.head_out))


class ToySeq2Seq:
    """Encoder blocks, then decoder blocks with cross-attention; tied embeddings and logits."""

    name = "toy-seq2seq"
    causal = True
    output_width = VOCAB

    def __init__(self, seed: int = 0) -> None:
        torch.manual_seed(seed)

        def attention(kind=ToyAttention, causal=True):
            q, k, v, o = (
                nn.Linear(*shape, bias=False)
                for shape in ((E, H * D), (E, H * D), (E, H * D), (H * D, E))
            )
            return kind(q, k, v, o, causal=causal)

        self.embed = nn.Embedding(VOCAB, E)
        self.self_attention = [attention(causal=i >= ENCODER) for i in range(ENCODER + DECODER)]
        self.cross = [attention(ToyCrossAttention, False) for _ in range(DECODER)]
        self.mlps = [ToyMLP() for _ in range(ENCODER + DECODER)]
        self._blocks = [
            Block(i, "encoder", self.self_attention[i], Sites(BLOCK_SITES), True, False)
            for i in range(ENCODER)
        ] + [
            Block(
                ENCODER + j,
                "decoder",
                self.self_attention[ENCODER + j],
                Sites(BLOCK_SITES),
                True,
                False,
                self.cross[j],
                "encoder",
            )
            for j in range(DECODER)
        ]

    def streams(self) -> list[Stream]:
        return [Stream("encoder", "text"), Stream("decoder", "text")]

    def blocks(self) -> list[Block]:
        return self._blocks

    def _block(self, i: int, x: Tensor, padding: Tensor, memory=None, memory_padding=None):
        sites = self._blocks[i].sites
        x = sites("resid_in", x)
        x = x + self.self_attention[i](x, padding, None)
        if i >= ENCODER:
            x = x + self.cross[i - ENCODER](x, memory, memory_padding)
        x = x + sites("mlp_out", self.mlps[i](sites("mlp_in", x)))
        return sites("resid_out", x)

    def run_blocks(
        self,
        batch: Mapping[str, TokenBatch],
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
        if rows is not None:
            raise ValueError("the toy encoder-decoder runs whole texts only")
        source, target = batch["encoder"], batch["decoder"]
        source_padding = ~source.attention_mask.repeat(copies, 1)
        target_padding = ~target.attention_mask.repeat(copies, 1)
        if start >= ENCODER and not (sources and "encoder" in sources):
            raise ValueError("a run that starts in the decoder needs the encoder's states")
        memory = None
        if start >= ENCODER:
            memory = sources["encoder"]
            if memory.shape[0] != copies * source.input_ids.shape[0]:
                memory = memory.repeat(copies, 1, 1)  # (copies * batch, pos, d_model)

        def call() -> Tensor:
            nonlocal memory
            x = self.embed(source.input_ids.repeat(copies, 1)) if start == 0 else hidden
            for i in range(start, ENCODER):
                memory = x = self._block(i, x, source_padding)
            y = self.embed(target.input_ids.repeat(copies, 1)) if start <= ENCODER else hidden
            for i in range(max(start, ENCODER), ENCODER + DECODER):
                y = self._block(i, y, target_padding, memory, source_padding)
            if start == ENCODER + DECODER:
                y = self._blocks[-1].sites("resid_out", y)
            return y if keep is None else y[:, keep]

        with ExitStack() as stack:
            given_stream(self._blocks, start, hidden)(stack)
            if interventions is not None:
                interventions(stack)
            return stopped_run(self._blocks, stop, call)

    def unembed(self, states: Tensor) -> Tensor:
        return states @ self.embed.weight.T
