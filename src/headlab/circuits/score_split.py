"""Why a head attends where it does: its scores at chosen (query, key) pairs split exactly into
what the query side and the key side read (score_sides.py), with the pair matrix, its two
marginals, and the key side of the strongest head components split by the source positions
those heads read.

A head component c (head H' of layer M < L) writes at the key position j

    write_c(j) = sum over t <= j of w_jt(H') v_t(H') W_O(H')^T

(w: its attention weights, v: its values): one write per source position t, and the key map is
affine with the norms held, so its key-side term is the sum over t of the terms of these writes.
That tells which earlier token, through which head, made the key match.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import torch
from torch import Tensor

from headlab.attention.interventions import record
from headlab.circuits.score_keys import KeySpec, keys_for
from headlab.circuits.score_sides import QK_BIAS, Sides, capped, kernel_scale, softcap_of
from headlab.circuits.score_writes import block_writes, carried_to
from headlab.models.hf.plain_attention import slides, text_config
from headlab.models.run_protocol import StopAt
from headlab.results.score_split_result import REST, PairSplit, ScoreSplitResult, SourceSplit

#: Texts up to this length read the kernel's own scores (bias and mask included) for the layer.
KERNEL_SCORES_UP_TO = 2048
#: Components kept on each side of a pair's heatmap (the others sum into "rest").
PAIR_SIDE = 10
#: Positions of one run of the side terms where the pairs' positions are close together.
SPAN = 256


def head_facts(sides: Sides, layer: int, head: int) -> dict:
    """The head's scale, soft-cap and (q_pos, k_pos) scores on the text: the kernel's own up to
    ``KERNEL_SCORES_UP_TO`` tokens, else scale * q k^T capped (families with an additive score
    bias need the short path)."""
    runner = sides.runner
    length = runner.ids.shape[1]
    cap = softcap_of(runner.model, layer)
    attention = runner.blocks[layer].attention
    group = head // (attention.num_heads // attention.num_kv_heads)
    if length <= KERNEL_SCORES_UP_TO:
        clean = sides.clean_scores(layer)
        scale = kernel_scale(clean["q"], clean["k"], clean["logits"])
        return {
            "scale": scale,
            "softcap": cap,
            "scores": clean["scores"][0, head],
            "kernel": True,
            "group": group,
        }
    probe = sides.clean_scores(layer, rows=slice(0, min(length, 32)))
    _refuse_a_bias_or_window(sides, layer, head, probe, cap)
    scale = kernel_scale(probe["q"], probe["k"], probe["logits"])
    q, k = sides.clean_qk(layer)
    raw = scale * q[0, head] @ k[0, group].t()  # (q_pos, k_pos)
    return {
        "scale": scale,
        "softcap": cap,
        "scores": capped(raw, cap),
        "kernel": False,
        "group": group,
    }


def _refuse_a_bias_or_window(sides: Sides, layer: int, head: int, probe: dict, cap) -> None:
    """ValueError (one line) where scale * q . k (capped) is not the kernel's score over a long
    text: a score bias (T5's relative bias, ALiBi in the mask) seen on the probe's first rows,
    or a sliding window shorter than the text (the module's, or the config's as Mistral keeps
    it)."""
    length = sides.runner.ids.shape[1]
    config = getattr(sides.runner.model, "config", None)
    module = sides.runner.blocks[layer].attention.module
    window = getattr(module, "sliding_window", None)
    if window is None and config is not None:
        window = getattr(text_config(config), "sliding_window", None)
    if slides(config, module, layer) and (window or 0) < length:
        raise ValueError(
            f"layer {layer} attends through a sliding window of {window}; over "
            f"{KERNEL_SCORES_UP_TO} tokens the split reads q . k alone: got {length} tokens"
        )
    kernel, plain = probe["scores"][0, head], capped(probe["logits"][0, head], cap)
    seen = torch.isfinite(kernel)
    gap = float((kernel - plain)[seen].abs().max()) if bool(seen.any()) else 0.0
    if gap > 1e-5 * max(1.0, float(plain[seen].abs().max())):
        raise ValueError(
            f"layer {layer} adds a bias to q . k (by up to {gap:.3g} on the first rows); over "
            f"{KERNEL_SCORES_UP_TO} tokens the split reads q . k alone: got {length} tokens"
        )


def position_runs(positions: list[int]) -> list[slice]:
    """Slices covering ``positions``: one where they lie within ``SPAN``, else one each."""
    lo, hi = min(positions), max(positions)
    if hi - lo < SPAN:
        return [slice(lo, hi + 1)]
    return [slice(p, p + 1) for p in sorted(set(positions))]


def terms_at(sides: Sides, layer: int, head: int, group: int, positions: list[int]) -> dict:
    """position -> (q terms (component + 1, d_head) of ``head``, k terms (component + 1,
    d_head) of K/V group ``group``), the components then ``QK_BIAS``."""
    out = {}
    for rows in position_runs(positions):
        q, k = sides.side_terms(layer, rows)  # (component + 1, batch, head|kv_head, rows, d)
        for p in range(rows.start, rows.stop):
            if p in positions:
                out[p] = (q[:, 0, head, p - rows.start], k[:, 0, group, p - rows.start])
    return out


def framed(pair: Tensor, names: list[str], qm: Tensor, km: Tensor, key_names=None):
    """The pair matrix ``pair`` (component, component) on the ``PAIR_SIDE`` components of
    largest |marginal| per side (``qm``, ``km``), with a "rest" row and column that keep its
    sum: (row names, column names, the grid as lists). ``key_names``: the key side's
    components where they are not ``names`` (a cross-attention's)."""
    rows = sorted(qm.abs().topk(min(PAIR_SIDE, qm.numel())).indices.tolist())
    cols = sorted(km.abs().topk(min(PAIR_SIDE, km.numel())).indices.tolist())
    kept = pair[rows][:, cols]
    rest_row = pair[:, cols].sum(0) - kept.sum(0)
    rest_col = pair[rows].sum(1) - kept.sum(1)
    corner = pair.sum() - kept.sum() - rest_row.sum() - rest_col.sum()
    grid = torch.cat(
        [torch.cat([kept, rest_col[:, None]], 1), torch.cat([rest_row, corner[None]])[None]]
    )
    keyed = names if key_names is None else key_names
    return [names[r] for r in rows] + [REST], [keyed[c] for c in cols] + [REST], grid.tolist()


def layer_pattern(sides: Sides, layer: int) -> tuple[Tensor, Tensor]:
    """(weights (head, q_pos, k_pos), values (kv_head, k_pos, d_head)) of ``layer`` on the
    text, from the kernel (one layer's whole pattern: for texts the memory allows)."""
    attention = sides.runner.blocks[layer].attention

    kept: dict = {}

    def hooks(stack: ExitStack) -> None:
        kept["r"] = stack.enter_context(record(attention, ["v", "weights"]))

    with torch.no_grad():
        sides.runner.forward(
            layer, sides.cache.resid[layer], 1, hooks, stop=StopAt(layer, "head_outputs")
        )
    got = kept["r"]
    return got["weights"][0], got["v"][0]


def is_head(name: str) -> bool:
    """Whether component ``name`` is a self-attention head ("M.H"): not the embeddings, an MLP,
    a constant or a cross-attention head ("M.xH", which reads another stream's positions)."""
    return "." in name and not name.startswith("mlp") and ".x" not in name


def source_writes(
    sides: Sides, layer: int, component: str, key: int, pattern: tuple[Tensor, Tensor]
) -> Tensor:
    """(source, batch, 1, embed_dim): head ``component``'s ("M.H") write at ``key`` split by
    the positions that head read (every position up to the key in a causal model, every
    position in an encoder), each source's part as it enters block ``layer`` of ``sides``'s
    stream (``layer``: the block count for the stream leaving the last block). ``pattern``:
    ``layer_pattern`` of layer M. Where a head's write is not its output through W_O alone
    (post-norms, an encoder's post-norm blocks: ``sides.direct`` False after ``writes``), each
    source's part of the head's output is carried through the blocks with their norms held
    (score_writes.py); they sum to the head's write at the key."""
    sender_layer, sender = (int(x) for x in component.split("."))
    runner = sides.runner
    attention = runner.blocks[sender_layer].attention
    weights, values = pattern
    kv = sender // (attention.num_heads // attention.num_kv_heads)
    count = key + 1 if runner.model.causal else weights.shape[-1]
    pieces = weights[sender, key, :count, None] * values[kv, :count]  # (source, d_head)
    rows = slice(key, key + 1)
    scaled = sides.formula_scale(sender_layer)
    if sides.direct or scaled is not None:
        w_o = attention.output_weight().detach().to(values)
        d = attention.head_dim
        slice_o = w_o[:, sender * d : (sender + 1) * d]  # (embed_dim, d_head)
        writes = (pieces @ slice_o.t())[:, None, None]  # (source, batch, rows, embed_dim)
        return writes if scaled is None else writes * scaled
    parts = pieces.new_zeros(count, 1, attention.num_heads, 1, pieces.shape[-1])
    parts[:, 0, sender, 0] = pieces
    block = runner.blocks[sender_layer]
    none = sides.cache.resid[0][None, :, rows][:0]
    writes = block_writes(runner, sides.cache, block, rows, none, parts, with_mlp=False)
    return carried_to(runner, sides.cache, sender_layer + 1, layer, rows, writes)


def source_terms(
    sides: Sides,
    layer: int,
    group: int,
    query_side: Tensor,
    scale: float,
    component: str,
    key: int,
    pattern: tuple[Tensor, Tensor],
) -> SourceSplit:
    """The key-side term of head ``component`` ("M.H") at ``key`` split by the positions that
    head read (``source_writes``): each source's write pushed through layer ``layer``'s key
    map (norms held) and dotted with ``query_side`` (the query's q, d_head) times ``scale``."""
    writes = source_writes(sides, layer, component, key, pattern)
    _, k = sides.side_terms(layer, slice(key, key + 1), writes)
    values_out = scale * (k[:-1, 0, group, 0] @ query_side)  # the constant is not a source's
    return SourceSplit(component, list(range(writes.shape[0])), values_out.tolist())


def split_scores(
    sides: Sides,
    layer: int,
    head: int,
    queries: list[int],
    spec: KeySpec,
    *,
    sources: int = 3,
    recompute: bool = False,
    tokens: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScoreSplitResult:
    """The split of ``head`` of ``layer`` at each query in ``queries`` and the keys ``spec``
    names for it (score_keys.py), on the one text ``sides`` ran. ``sources``: the head
    components (by |key-side term|) whose key side is split by source position, per pair.
    ``recompute``: also each key-side component's effect with the norms recomputed."""
    runner = sides.runner
    if runner.batch != 1:
        raise ValueError(f"a score split reads one text, got a batch of {runner.batch}")
    ids = runner.ids[0].tolist()
    facts = head_facts(sides, layer, head)
    scores, scale, cap, group = facts["scores"], facts["scale"], facts["softcap"], facts["group"]
    wanted = []
    for i in queries:
        row = scores[i]
        for j in keys_for(spec, ids, i, row if spec.needs_scores() else None, runner.model.causal):
            if bool(torch.isfinite(row[j])):
                wanted.append((i, j))
            elif spec.kind == "position":
                raise ValueError(f"key {j} is hidden from query {i} by the layer's mask")
    if not wanted:
        raise ValueError(f"--keys {spec.name()} names no key the queries see")
    terms = terms_at(sides, layer, head, group, sorted({p for pair in wanted for p in pair}))
    names = [*sides.components(layer), QK_BIAS]
    patterns: dict[int, tuple[Tensor, Tensor]] = {}
    pairs = []
    for n, (i, j) in enumerate(wanted):
        q_terms, k_terms = terms[i][0], terms[j][1]
        pair = scale * q_terms @ k_terms.t()  # (component + 1, component + 1)
        qm, km = pair.sum(1), pair.sum(0)
        raw = pair.sum()
        score = float(scores[i, j]) if facts["kernel"] else None
        rows, cols, grid = framed(pair, names, qm, km)
        split = []
        heads = [c for c in km.abs().argsort(descending=True).tolist() if is_head(names[c])]
        for c in heads[:sources]:
            sender_layer = int(names[c].split(".")[0])
            if sender_layer not in patterns:
                patterns[sender_layer] = layer_pattern(sides, sender_layer)
            split.append(
                source_terms(
                    sides, layer, group, q_terms.sum(0), scale, names[c], j, patterns[sender_layer]
                )
            )
        moved = recomputed_terms(sides, layer, group, q_terms.sum(0), scale, j) if recompute else []
        capped_raw = float(capped(raw, cap))
        pairs.append(
            PairSplit(
                batch=0,
                query=i,
                key=j,
                score=score,
                raw=float(raw),
                softcap_term=capped_raw - float(raw),
                bias_term=None if score is None else score - capped_raw,
                query_marginal=qm.tolist(),
                key_marginal=km.tolist(),
                pair_rows=rows,
                pair_cols=cols,
                pair=grid,
                sources=split,
                recomputed=moved,
            )
        )
        if progress is not None:
            progress(n + 1, len(wanted))
    return ScoreSplitResult(
        model=runner.model.name,
        layer=layer,
        head=head,
        kv_group=group,
        keys=spec.name(),
        tokens=[tokens or [str(t) for t in ids]],
        components=names,
        scale=scale,
        softcap=cap,
        pairs=pairs,
    )


def recomputed_terms(
    sides: Sides, layer: int, group: int, query_side: Tensor, scale: float, key: int
) -> list[float]:
    """Per key-side component (``QK_BIAS`` last, 0: no input carries it), the score's change
    when its write is taken out of the key input at ``key`` with the norms recomputed:
    scale * q . (k(x) - k(x - write))."""
    rows = slice(key, key + 1)
    writes = sides.writes(layer, rows)
    stream = sides.cache.resid[layer][:, rows]
    k = sides.recomputed_k(layer, rows, stream[None] - writes)  # (component + 1, ...)
    change = scale * ((k[-1:] - k[:-1])[:, 0, group, 0] @ query_side)
    return [*change.tolist(), 0.0]


__all__ = [
    "KERNEL_SCORES_UP_TO",
    "framed",
    "head_facts",
    "is_head",
    "layer_pattern",
    "position_runs",
    "recomputed_terms",
    "source_terms",
    "source_writes",
    "split_scores",
    "terms_at",
]
