"""The score split of an encoder-decoder's cross-attention: decoder queries over encoder keys.

A cross-attention head of decoder block L scores a target position i against a source position
j: ``s_ij = scale * q_i . k_j + bias_ij`` (bias: the source's mask; T5, BART and Whisper have no
position bias there). The two sides read two streams:

- the query side, the decoder's stream after block L's self-attention: the decoder's
  components entering block L (``Sides.writes`` of the decoder: ``embed``, ``M.H``, ``M.xH``,
  ``mlp.M``, ``out-bias``) and block L's own self-attention heads (``L.H``), through block L's
  norms held at the run's scales (T5, Whisper: the cross-attention's pre-norm; BART, Marian:
  the post-norm after the self-attention), then the cross-attention's q map;
- the key side, the encoder's stream leaving its last block: the encoder's components
  (``enc.embed``, ``enc.M.H``, ``enc.mlp.M``, ``enc.out-bias``; ``Sides.writes`` of the
  encoder, carried through its post-norms in BART), through the encoder's final norm held at
  the run's scale (T5, Whisper; the run protocol's ``Stream.final_norm``; BART has none), then
  the cross-attention's k map.

Each map is affine with its norms held, so ``q_i = sum_a q_i^a + q_i^qk-bias``, likewise k_j,
and ``scale * q_i . k_j = sum over (a, b) of scale * q_i^a . k_j^b`` exactly. The q^a and k^b
come from the family's own code: the decoder runs from block L on copies (one per query-side
component, a zero copy, the real stream last) stopped at the cross-attention's q site; and on
copies of the encoder's final states (one per key-side component, a zero copy, the real states
last) handed to the cross-attention, stopped at its k site.

The key side of the strongest encoder heads is split further by the source position each read
(``cross_source_terms``): encoder head H of block M writes at source position j the sum over t
of ``w_jt v_t W_O^T``, each source's part goes to k the way the whole write does, so the parts
sum to the head's key-side term. That map, held, is linear in a write at j: each part is its
write dotted with the map's gradient there (``CrossSides.key_direction``, one backward per
pair), not a copy of the encoder's whole final states per source.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import intervene, record
from headlab.circuits.frozen_norms import frozen_norms
from headlab.circuits.graph import head_name
from headlab.circuits.score_keys import KeySpec, keys_for
from headlab.circuits.score_sides import COPIES_BUDGET, OUT_BIAS, QK_BIAS, Sides, kernel_scale
from headlab.circuits.score_split import (
    framed,
    is_head,
    layer_pattern,
    position_runs,
    source_writes,
)
from headlab.circuits.score_writes import one_head_each
from headlab.models.hf.seq2seq_view import DecoderStream, EncoderStream
from headlab.models.run_protocol import StopAt
from headlab.results.score_split_result import PairSplit, ScoreSplitResult, SourceSplit

#: The prefix of the encoder's components on the key side.
ENCODER = "enc."
#: The key choices that mean something across two streams.
CROSS_KEYS = ("attended", "top", "all", "position")


def check_cross_keys(spec: KeySpec) -> None:
    """ValueError (one line) for a key pattern that names a position of the query's own text."""
    if spec.kind not in CROSS_KEYS:
        raise ValueError(
            "--keys for a cross-attention is attended, top-K, all or a source position, "
            f"got {spec.name()}"
        )


class CrossSides:
    """One clean run of ``seq2seq`` (an ``EncoderDecoderModel``) on ``source`` (its
    ``SourceBatch``, one text or one audio window) and ``target_ids`` (1, pos) int64; then the
    query-side and key-side terms of any decoder block's cross-attention heads."""

    def __init__(self, seq2seq, source, target_ids: Tensor) -> None:
        self.decoder = DecoderStream(seq2seq, source)
        self.encoder = EncoderStream(seq2seq, source)
        self.queries = Sides(self.decoder, target_ids)
        self.keys = Sides(self.encoder, self.encoder.ids())
        self.source_length = int(source.mask.shape[1])

    @property
    def layers(self) -> int:
        return self.queries.layers

    def query_components(self, layer: int) -> list[str]:
        """The components of the query side of block ``layer``'s cross-attention, then
        ``OUT_BIAS``."""
        block = self.queries.runner.blocks[layer]
        own = [head_name(layer, h) for h in range(block.attention.num_heads)]
        return [*self.queries.components(layer)[:-1], *own, OUT_BIAS]

    def key_components(self) -> list[str]:
        """The encoder's components, ``ENCODER``-prefixed, its ``out-bias`` last."""
        return [ENCODER + name for name in self.keys.components(self.keys.layers)]

    def query_terms(self, layer: int, rows: slice) -> Tensor:
        """(component + 1, batch, head, rows, d_head): each of ``query_components(layer)``'s
        part of the cross-attention's q at the target positions ``rows``, then the constant
        (``QK_BIAS``: the norms' shifts, the projections' biases, block ``layer``'s own
        self-attention output bias); they sum to the run's q."""
        sides = self.queries
        block = sides.runner.blocks[layer]
        writes = sides.writes(layer, rows)  # (component, batch, rows, d_model), out-bias last
        heads = sides.cache.head_outputs[layer][:, :, rows]  # (batch, head, rows, d_head)
        parts = one_head_each(heads)
        b, n, count = heads.shape[0], writes.shape[0], parts.shape[0]
        copies = n + count + 2
        outputs = heads.new_zeros(copies, *heads.shape)
        outputs[n : n + count] = parts
        outputs[-1] = heads
        stream = sides.cache.resid[layer][:, rows]
        zeros = stream.new_zeros(count + 1, *stream.shape)
        hidden = torch.cat([writes, zeros, stream[None]]).flatten(0, 1)

        def hooks(stack: ExitStack) -> None:
            stack.enter_context(frozen_norms(block.norms, b))
            held = outputs.flatten(0, 1)
            stack.enter_context(intervene(block.attention, "head_outputs", lambda _t: held))

        stop = StopAt(layer, "q", cross=True)
        with torch.no_grad():
            q = sides.runner.forward(layer, hidden, copies, hooks, rows, stop)
        q = q.unflatten(0, (copies, b))  # (copies, batch, head, rows, d_head)
        zero = q[-2:-1]
        terms = q[:-2] - zero
        return torch.cat([terms[: n - 1], terms[n : n + count], terms[n - 1 : n], zero])

    def key_terms(self, layer: int, rows: slice) -> Tensor:
        """(component + 1, batch, head, rows, d_head): each of ``key_components()``'s part of
        block ``layer``'s cross-attention k at the source positions ``rows``, then the
        constant (``QK_BIAS``: the final norm's shift, the k projection's bias); they sum to
        the run's k. The copies hold the encoder's whole final states (the cross-attention's
        mask reads every source position), a few components at a time (``COPIES_BUDGET``)."""
        keys = self.keys
        writes = keys.writes(keys.layers, rows)  # (component, batch, rows, d_model)
        real = keys.cache.resid[keys.layers]  # (batch, source pos, d_model)
        per = max(1, COPIES_BUDGET // max(1, real.numel() * real.element_size() * 4))
        terms = []
        for start in range(0, writes.shape[0], per):
            k = self._run_keys(layer, rows, writes[start : start + per], real)
            terms.append(k[:-1] - k[-1])
        return torch.cat([*terms, k[-1:]])  # the constant: the zero copy's k

    def _run_keys(self, layer: int, rows: slice, part: Tensor, real: Tensor) -> Tensor:
        """(copy + 1, batch, head, rows, d_head) the k of the copies of the encoder's final
        states that hold ``part``'s writes (part, batch, rows, d_model) at ``rows``, then of a
        zero copy; the real states run last, holding the final norm's scales, and are dropped."""
        sides = self.queries
        b, copies = real.shape[0], part.shape[0] + 2
        memory = real.new_zeros(copies, *real.shape)  # (copies, batch, source pos, d_model)
        memory[: part.shape[0], :, rows] = part
        memory[-1] = real
        row = slice(0, 1)  # the k map reads no target position: one runs
        hidden = sides.cache.resid[layer][:, row].repeat(copies, 1, 1)
        final = self.encoder.final_norm

        def hooks(stack: ExitStack) -> None:
            if final is not None:
                stack.enter_context(frozen_norms([final], b))

        with torch.set_grad_enabled(part.requires_grad):
            k = self.decoder.run_blocks(
                sides.runner.input,
                start=layer,
                hidden=hidden,
                copies=copies,
                stop=StopAt(layer, "k", cross=True),
                rows=row,
                interventions=hooks,
                sources={"encoder": memory.flatten(0, 1)},
            )
        return k.unflatten(0, (copies, b))[:-1, :, :, rows]

    def key_direction(self, layer: int, head: int, key: int, query_side: Tensor) -> Tensor:
        """(d_model,): the gradient of ``query_side . k`` (``head`` of block ``layer``'s
        cross-attention, its k at source position ``key``) in a write at ``key`` into the
        encoder's stream leaving its last block. With the final norm held, the k map is affine
        there, so any write's part of ``query_side . k`` is its dot with this: one run and one
        backward of the family's own code, whatever the number of writes (their copies would
        each hold the encoder's whole final states)."""
        real = self.keys.cache.resid[self.keys.layers]  # (batch, source pos, d_model)
        write = real.new_zeros(1, 1, 1, real.shape[-1], requires_grad=True)
        with torch.enable_grad():  # the callers may run under no_grad
            k = self._run_keys(layer, slice(key, key + 1), write, real)  # (2, batch, head, 1, d)
            moved = (k[0, 0, head, 0] - k[1, 0, head, 0]) @ query_side.detach()
            (direction,) = torch.autograd.grad(moved, write)
        return direction.reshape(-1)

    def clean_scores(self, layer: int) -> dict[str, Tensor]:
        """Block ``layer``'s cross-attention on the clean run: q, k (its sites), ``logits``
        (scale * q k^T) and ``scores`` (the kernel's pre-softmax scores, (batch, head, q_pos,
        source pos))."""
        sides = self.queries
        cross = sides.runner.blocks[layer].cross_attention
        logits: list[Tensor] = []
        kept: dict = {}

        def keep_logits(t: Tensor) -> None:
            logits.append(t.detach())

        def hooks(stack: ExitStack) -> None:
            kept["r"] = stack.enter_context(record(cross, ["q", "k", "scores"]))
            cross.sites.add("logits", keep_logits)
            stack.callback(cross.sites.remove, "logits", keep_logits)

        stream = sides.cache.resid[layer]
        with torch.no_grad():
            sides.runner.forward(layer, stream, 1, hooks, stop=StopAt(layer, "weights", cross=True))
        seen = kept["r"]
        return {"q": seen["q"], "k": seen["k"], "logits": logits[-1], "scores": seen["scores"]}


def split_cross_scores(
    sides: CrossSides,
    layer: int,
    head: int,
    queries: list[int],
    spec: KeySpec,
    *,
    sources: int = 3,
    tokens: list[str] | None = None,
    source_labels: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScoreSplitResult:
    """The split of cross-attention ``head`` of decoder block ``layer`` at each target
    position in ``queries`` and the source positions ``spec`` names for it (attended, top-K,
    all, a position). ``sources``: the encoder heads (by |key-side term|) whose key side is
    split by the source position they read, per pair (``cross_source_terms``). ``tokens``: the
    target's tokens; ``source_labels``: the source's (its tokens, or the times of an audio
    window's positions)."""
    check_cross_keys(spec)
    runner = sides.queries.runner
    if runner.batch != 1:
        raise ValueError(f"a score split reads one text, got a batch of {runner.batch}")
    clean = sides.clean_scores(layer)
    scale = kernel_scale(clean["q"], clean["k"], clean["logits"])
    scores = clean["scores"][0, head]  # (q_pos, source pos)
    source = list(range(sides.source_length))
    wanted = []
    for i in queries:
        row = scores[i]
        for j in keys_for(spec, source, 0, row if spec.needs_scores() else None, causal=False):
            if bool(torch.isfinite(row[j])):
                wanted.append((i, j))
            elif spec.kind == "position":
                raise ValueError(f"source position {j} is masked")
    if not wanted:
        raise ValueError(f"--keys {spec.name()} names no source position the queries see")
    names = [*sides.query_components(layer), QK_BIAS]
    key_names = [*sides.key_components(), QK_BIAS]
    k_at: dict[int, Tensor] = {}  # source position -> (component + 1, d_head)
    for rows in position_runs(sorted({j for _, j in wanted})):
        k = sides.key_terms(layer, rows)[:, 0, head]  # (component + 1, rows, d_head)
        k_at.update({j: k[:, j - rows.start] for j in range(rows.start, rows.stop)})
    q_rows: dict[int, Tensor] = {}
    patterns: dict[int, tuple[Tensor, Tensor]] = {}
    pairs = []
    for n, (i, j) in enumerate(wanted):
        if i not in q_rows:
            q_rows[i] = sides.query_terms(layer, slice(i, i + 1))[:, 0, head, 0]
        pair = scale * q_rows[i] @ k_at[j].t()  # (query component + 1, key component + 1)
        qm, km = pair.sum(1), pair.sum(0)
        raw, score = float(pair.sum()), float(scores[i, j])
        rows, cols, grid = framed(pair, names, qm, km, key_names)
        order = km.abs().argsort(descending=True).tolist()
        heads = [key_names[c] for c in order if is_head(key_names[c].removeprefix(ENCODER))]
        split = []
        direction = sides.key_direction(layer, head, j, q_rows[i].sum(0)) if sources else None
        for name in heads[:sources]:
            sender_layer = int(name.removeprefix(ENCODER).split(".")[0])
            if sender_layer not in patterns:
                patterns[sender_layer] = layer_pattern(sides.keys, sender_layer)
            split.append(
                cross_source_terms(sides, direction, scale, name, j, patterns[sender_layer])
            )
        pairs.append(
            PairSplit(
                batch=0,
                query=i,
                key=j,
                score=score,
                raw=raw,
                softcap_term=0.0,
                bias_term=score - raw,
                query_marginal=qm.tolist(),
                key_marginal=km.tolist(),
                pair_rows=rows,
                pair_cols=cols,
                pair=grid,
                sources=split,
            )
        )
        if progress is not None:
            progress(n + 1, len(wanted))
    ids = runner.ids[0].tolist()
    return ScoreSplitResult(
        model=f"{sides.decoder.seq2seq.name} (cross-attention)",
        layer=layer,
        head=head,
        kv_group=head,
        keys=spec.name(),
        tokens=[tokens or [str(t) for t in ids]],
        components=names,
        scale=scale,
        softcap=None,
        pairs=pairs,
        attention="cross",
        key_components=key_names,
        key_tokens=source_labels or [str(j) for j in source],
    )


def cross_source_terms(
    sides: CrossSides, direction: Tensor, scale: float, component: str, key: int, pattern
) -> SourceSplit:
    """The key-side term of encoder head ``component`` ("enc.M.H") at source position ``key``
    split by the source positions that head read: each source's part of its write in the
    encoder's stream leaving the last block (``score_split.source_writes``: carried through
    BART's post-norms) dotted with ``direction`` (``CrossSides.key_direction`` of the pair: the
    encoder's final norm held at the run's scale, then the cross-attention's k map and the
    query's q) times ``scale``. ``pattern``: ``layer_pattern`` of encoder layer M."""
    keys = sides.keys
    name = component.removeprefix(ENCODER)
    writes = source_writes(keys, keys.layers, name, key, pattern)  # (source, 1, 1, d_model)
    values = scale * (writes[:, 0, 0] @ direction)  # the constant is not a source's
    return SourceSplit(component, list(range(writes.shape[0])), values.tolist())


__all__ = [
    "CROSS_KEYS",
    "ENCODER",
    "CrossSides",
    "check_cross_keys",
    "cross_source_terms",
    "split_cross_scores",
]
