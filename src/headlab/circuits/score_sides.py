"""Each attention score of a head split exactly into what its query side and key side read.

A head's pre-softmax score is ``s_ij = cap(scale * q_i . k_j) + bias_ij`` (cap: the family's
soft-cap, bias: its additive score bias and mask). The residual stream entering the layer at a
position is the sum of what every earlier component wrote there (``Sides.writes``):

    embed        the embeddings (token and learned positions)
    L.H          head H of layer L: its output through its own slice of W_O
    mlp.L        the MLP of layer L
    out-bias     the output projections' biases (the stream minus the writes above)

With every norm on the way to q and k held at this run's scales (one number per position, and
per head for a per-head QK-norm: frozen_norms.py), the map from the stream to q_i (to k_j) is
affine: projections, QK-norm, rotary positions (a linear map at each position) and the K/V group
of a GQA layer. So ``q_i = sum_a q_i^a + q_i^bias`` (the constant: the norms' shifts and the
projections' biases, "qk-bias"), likewise k_j, and

    scale * q_i . k_j = sum over (a, b) of scale * q_i^a . k_j^b        (the pair matrix)

exactly, given the frozen scales. The soft-cap term is cap(raw) - raw and the bias term the
kernel's score minus cap(raw): each named as its own term, so the pair matrix, the soft-cap
term and the bias term sum to the kernel's score.

The q^a and k^b are made by the family's own code (``Runner.forward`` from the layer, stopped at
the kernel's q, k, v sites: resume.py), run once on copies of the positions, one copy per
component plus a zero copy (the constant) plus the real stream (whose scales the norms hold).
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import record
from headlab.circuits.frozen_norms import frozen_norms, qk_norms
from headlab.circuits.graph import EMBED, head_name, mlp_name
from headlab.circuits.resume import Cache, Runner
from headlab.circuits.score_writes import block_writes
from headlab.circuits.stream_graph import cross_name
from headlab.models.hf.adapter import TransformersModel
from headlab.models.run_protocol import StopAt

#: The stream's own constant (output projections' biases) and the q/k maps' constant.
OUT_BIAS = "out-bias"
QK_BIAS = "qk-bias"
#: Largest share of the stream the writes may miss beyond the output biases (else: a family
#: whose writes are not a head's output through W_O: post-norms, gates).
LINEAR_TOLERANCE = 1e-4
#: Bytes of copies (components x positions x stream width) one run holds.
COPIES_BUDGET = 256 * 2**20


class Sides:
    """One clean run of ``model`` on ``ids`` (batch, pos) int64 (``attention_mask`` (batch,
    pos), default all ones), kept once; then the query-side and key-side terms of any layer's
    heads at any positions. Runs in the model's dtype (float64 for exact checks)."""

    def __init__(
        self, model: TransformersModel, ids: Tensor, attention_mask: Tensor | None = None
    ) -> None:
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask
        positions = torch.tensor([ids.shape[1] - 1])
        self.runner = Runner(model, ids, mask, positions, encoders=True)
        self.cache: Cache = self.runner.cache(ids)
        #: whether the last ``writes`` took the formula (a head's output through its W_O
        #: slice); False: the blocks ran with their post-norms held
        self.direct: bool | None = None

    @property
    def layers(self) -> int:
        return len(self.runner.blocks)

    def components(self, layer: int) -> list[str]:
        """The components that write into the stream entering ``layer``, in the order they
        write, then ``OUT_BIAS``."""
        names = [EMBED]
        for block in self.runner.blocks[:layer]:
            names += [head_name(block.index, h) for h in range(block.attention.num_heads)]
            if block.cross_attention is not None:  # a decoder block of an encoder-decoder
                count = block.cross_attention.num_heads
                names += [cross_name(block.index, h) for h in range(count)]
            names += [mlp_name(block.index)] if block.has_mlp else []
        return [*names, OUT_BIAS]

    def writes(self, layer: int, rows: slice) -> Tensor:
        """(component, batch, rows, embed_dim): each of ``components(layer)``'s write at the
        positions ``rows``; they sum to the stream entering ``layer`` there. A head's write is
        its output through its own slice of W_O where the family adds that to the stream
        (observed: the writes then sum to the stream up to the output biases); else (post-norms:
        Gemma 2, OLMo 2, and an encoder's post-norm blocks, BERT) each block runs once on copies,
        one per component written so far, head and MLP, with its norms held at the run's scales
        (``score_writes.block_writes``)."""
        stream = self.cache.resid[layer][:, rows]
        found, biases = self._direct_writes(layer, rows)
        rest = stream - torch.stack(found).sum(0)
        gap = float((rest - biases).abs().max())
        self.direct = gap <= LINEAR_TOLERANCE * max(float(stream.abs().max()), 1e-12)
        if not self.direct:
            carried = self.cache.resid[0][None, :, rows]
            for block in self.runner.blocks[:layer]:
                carried = block_writes(self.runner, self.cache, block, rows, carried)
            found = list(carried)
            rest = stream - carried.sum(0)
        return torch.stack([*found, rest])

    def formula_scale(self, index: int) -> Tensor | None:
        """(embed_dim,) the factor by which layer ``index`` multiplies a head's write by the
        formula before adding it, where the last ``writes`` took the formula with such factors
        (an image encoder's layer scale: image_sides.py); None: none."""
        return None

    def _direct_writes(self, layer: int, rows: slice) -> tuple[list[Tensor], Tensor]:
        """The writes by the formula (a head's output through its W_O slice, an MLP's output)
        and the sum of the output projections' biases."""
        found = [self.cache.resid[0][:, rows]]
        biases = torch.zeros_like(found[0][0, 0])
        for block in self.runner.blocks[:layer]:
            writes, bias = self.layer_writes(block.index, rows)
            found += list(writes)
            biases = biases + bias
        return found, biases

    def layer_writes(self, index: int, rows: slice) -> tuple[Tensor, Tensor]:
        """(head [+ cross head] [+ mlp], batch, rows, embed_dim) layer ``index``'s writes by the
        formula, and its output projections' biases (embed_dim,) (zeros without one)."""
        block, cache = self.runner.blocks[index], self.cache
        found, bias = _head_writes(block.attention, cache.head_outputs[index][:, :, rows], index)
        if block.cross_attention is not None:
            outputs = cache.cross[index][:, :, rows]
            more, more_bias = _head_writes(block.cross_attention, outputs, index)
            found, bias = torch.cat([found, more]), bias + more_bias
        if block.has_mlp:
            found = torch.cat([found, cache.mlp[index][None, :, rows]])
        return found, bias

    def side_terms(
        self, layer: int, rows: slice, writes: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """(q terms (component + 1, batch, head, rows, d_head), k terms (component + 1, batch,
        kv_head, rows, d_head)) at the positions ``rows``: each component's part of the kernel's
        q and k (``components(layer)``, then ``QK_BIAS``), the norms held at the run's scales;
        they sum to the run's q and k. ``writes``: (component, batch, rows, embed_dim) to split
        instead of ``writes(layer, rows)`` (a part of them: any sum of writes)."""
        writes = self.writes(layer, rows) if writes is None else writes
        stream = self.cache.resid[layer][:, rows]
        terms_q, terms_k = [], []
        per = max(1, COPIES_BUDGET // max(1, stream.numel() * stream.element_size() * 8))
        for start in range(0, max(1, writes.shape[0]), per):
            q, k = self._run(layer, rows, writes[start : start + per], stream)
            terms_q.append(q[:-1] - q[-1])
            terms_k.append(k[:-1] - k[-1])
        terms_q.append(q[-1:])  # the constant: the zero copy's q and k
        terms_k.append(k[-1:])
        return torch.cat(terms_q), torch.cat(terms_k)

    def _run(self, layer: int, rows: slice, part: Tensor, stream: Tensor) -> tuple[Tensor, Tensor]:
        """q and k (copy, batch, head|kv_head, rows, d_head) of copies: ``part``'s writes,
        then a zero copy; a last copy, the real stream, whose scales every norm holds, is run
        and dropped."""
        block = self.runner.blocks[layer]
        b = stream.shape[0]
        hidden = torch.cat([part.flatten(0, 1), torch.zeros_like(stream), stream])
        copies = part.shape[0] + 2

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(frozen_norms(qk_norms(block), b))

        with torch.no_grad():
            seen = self.runner.values(layer, hidden, copies, hooks, rows)
        q = seen["q"].unflatten(0, (copies, b))
        k = seen["k"].unflatten(0, (copies, b))
        return q[:-1], k[:-1]

    def clean_qk(self, layer: int) -> tuple[Tensor, Tensor]:
        """The layer's q (batch, head, pos, d_head) and k (batch, kv_head, pos, d_head) on the
        text, as the kernel receives them."""
        with torch.no_grad():
            seen = self.runner.values(layer, self.cache.resid[layer], 1)
        return seen["q"], seen["k"]

    def recomputed_k(self, layer: int, rows: slice, inputs: Tensor) -> Tensor:
        """(copy + 1, batch, kv_head, rows, d_head): the k of each of ``inputs`` (copy, batch,
        rows, embed_dim), streams at ``rows``, with the norms computing their own scales, then
        the real stream's."""
        stream = self.cache.resid[layer][:, rows]
        hidden = torch.cat([inputs.flatten(0, 1), stream])
        copies = inputs.shape[0] + 1
        with torch.no_grad():
            seen = self.runner.values(layer, hidden, copies, None, rows)
        return seen["k"].unflatten(0, (copies, stream.shape[0]))

    def clean_scores(
        self, layer: int, held: bool = True, rows: slice | None = None
    ) -> dict[str, Tensor]:
        """The layer's kernel run on the clean stream: q, k (the sites), ``logits`` (scale * q
        k^T, before soft-cap and mask) and ``scores`` (the kernel's pre-softmax scores), each
        (batch, head|kv_head, q_pos, ...). ``held``: the norms before q and k hold their scales
        as the split does (the same values, up to the rounding of a norm the family computes in
        float32 whatever the model's dtype: Llama's RMSNorm). Holds (q_pos, k_pos) for every
        head: for short texts."""
        block = self.runner.blocks[layer]
        attention = block.attention
        logits: list[Tensor] = []

        def keep_logits(t: Tensor) -> None:
            logits.append(t.detach())

        kept: dict = {}

        def hooks(stack: ExitStack) -> None:
            if held:
                stack.enter_context(frozen_norms(qk_norms(block), self.runner.batch))
            kept["r"] = stack.enter_context(record(attention, ["q", "k", "scores"]))
            attention.sites.add("logits", keep_logits)
            stack.callback(attention.sites.remove, "logits", keep_logits)

        stream = self.cache.resid[layer]
        with torch.no_grad():
            self.runner.forward(
                layer,
                stream if rows is None else stream[:, rows],
                1,
                hooks,
                rows,
                StopAt(layer, "weights"),
            )
        recording = kept["r"]
        return {
            "q": recording["q"],
            "k": recording["k"],
            "logits": logits[-1],
            "scores": recording["scores"],
        }


def _head_writes(attention, heads: Tensor, index: int) -> tuple[Tensor, Tensor]:
    """(head, batch, rows, embed_dim) each head's output ``heads`` (batch, head, rows, d_head)
    through its own slice of ``attention``'s W_O, and W_O's bias (zeros without one)."""
    w_o = attention.output_weight()
    if w_o is None:
        raise ValueError(
            f"layer {index} has no output projection taking its heads' outputs unchanged: "
            "its heads' writes are not their own"
        )
    w = w_o.detach().to(heads).reshape(w_o.shape[0], attention.num_heads, -1)
    found = torch.einsum("bhpd,ehd->hbpe", heads, w)
    bias = getattr(attention.output.module, "bias", None)
    if bias is None:
        return found, torch.zeros_like(heads[0, 0, 0, :1]).expand(w.shape[0])
    return found, bias.detach().to(heads)


def kernel_scale(q: Tensor, k: Tensor, logits: Tensor) -> float:
    """The kernel's score scale read from its logits: <logits, q k^T> / <q k^T, q k^T> with K/V
    heads repeated over their groups (exact where logits = scale * q k^T)."""
    group = q.shape[1] // k.shape[1]
    qk = q @ k.repeat_interleave(group, dim=1).transpose(-2, -1)
    return float((logits * qk).sum() / qk.pow(2).sum())


def softcap_of(model: TransformersModel, layer: int) -> float | None:
    """The family's soft-cap of the logits at ``layer`` (Gemma 2's ``attn_logit_softcapping``),
    None where it has none."""
    module = model.layers[layer].module
    cap = getattr(module, "attn_logit_softcapping", None)
    if cap is None:
        cap = getattr(model.config, "attn_logit_softcapping", None)
    return None if cap is None else float(cap)


def capped(raw: Tensor, cap: float | None) -> Tensor:
    return raw if cap is None else torch.tanh(raw / cap) * cap


__all__ = [
    "OUT_BIAS",
    "QK_BIAS",
    "Sides",
    "capped",
    "kernel_scale",
    "softcap_of",
]
