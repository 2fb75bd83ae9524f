"""What one head can express and what h heads can: the rank bottleneck and the one-pattern limit.

Rank (Bhojanapalli et al. 2020). One head's scores over n positions are
    S = (X W_Q)(X W_K)^T / sqrt(d_head)        (q_pos, k_pos), rank S <= d_head
so for d_head < n not every row-stochastic n x n matrix is softmax(S). ``fit_pattern`` fits a
target T by gradient descent on W_Q, W_K (X fixed, orthonormal, d_model = n) and returns the mean
row KL(T || softmax(S)): a floor when d_head < n, near zero once d_head >= n.

Patterns (the other side). One head has one attention row per query; h heads have h. Target: for
every query t, output block i (of h, each d_model / h wide) must carry token t + i (cyclically)
through a fixed random map. ``fit_offsets`` trains one layer with 1 head of d_model and with h
heads of d_model / h (equal parameters) on random token contents with fixed positions and returns
the relative error of each: a single head must average the h tokens it needs, h heads need not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from headlab.attention.module import MultiHeadAttention
from headlab.attention.one_thread import one_torch_thread
from headlab.limits import check_int, check_seed, check_sizes
from headlab.results.expressivity_result import ExpressivityResult, PatternRow, RankRow


def score_rank(module: MultiHeadAttention, x: torch.Tensor, *, tol: float = 1e-9) -> list[int]:
    """Numerical rank of each head's score matrix for one input x (pos, E): a list of H ints.

    Each is at most min(head_dim, pos); ``tol`` is relative to the largest singular value.
    """
    trace = module.trace(x)  # unbatched (pos, E): the trace adds batch = 1
    ranks = []
    for s in trace.scores[0].detach().double():  # (q_pos, k_pos) per head
        sv = torch.linalg.svdvals(s)
        ranks.append(int((sv > tol * max(float(sv[0]), 1e-300)).sum()))
    return ranks


def random_targets(n: int, count: int, seed: int, *, spread: float = 2.0) -> np.ndarray:
    """(count, n, n) row-stochastic targets softmax(spread * G), G ~ N(0, 1): full-rank logits."""
    rng = np.random.default_rng(seed)
    logits = spread * rng.standard_normal((count, n, n))
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def row_kl(target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Mean over rows of KL(target || softmax(logits)); (..., q_pos, k_pos) -> (...)."""
    log_p = logits.log_softmax(-1)
    t = target.clamp_min(1e-30)
    return (target * (t.log() - log_p)).sum(-1).mean(-1)


def fit_patterns(
    targets: np.ndarray, head_dim: int, *, steps: int = 600, lr: float = 0.05, seed: int = 0
) -> np.ndarray:
    """Best mean row KL(target || softmax(S)) one head of ``head_dim`` reaches, per target.

    targets: (count, n, n) row-stochastic -> (count,) floats. Adam on each target's own W_Q, W_K
    (n x head_dim) with X an orthonormal n x n input, so S ranges over every matrix of rank
    <= head_dim; the targets are fitted side by side (one batched problem).
    """
    if targets.ndim != 3 or targets.shape[1] != targets.shape[2]:
        raise ValueError(f"targets must be (count, n, n), got shape {targets.shape}")
    count, n, _ = targets.shape
    gen = torch.Generator().manual_seed(seed)
    x, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    shape = (count, n, head_dim)
    w_q = (torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    w_k = (torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    t = torch.as_tensor(targets, dtype=torch.float64)
    opt = torch.optim.Adam([w_q, w_k], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    best = torch.full((count,), float("inf"), dtype=torch.float64)
    for _ in range(steps):
        s = (x @ w_q) @ (x @ w_k).transpose(1, 2) * head_dim**-0.5  # (count, q_pos, k_pos)
        kl = row_kl(t, s)  # (count,)
        best = torch.minimum(best, kl.detach())
        opt.zero_grad()
        kl.sum().backward()
        opt.step()
        sched.step()
    return best.numpy()


def offset_batch(
    batch: int, n: int, d_model: int, maps: torch.Tensor, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (batch, n, E) = [random content (E - n wide) | one-hot position * 4]; y (batch, n, E)
    whose block i (E / blocks wide, blocks = len(maps)) at query t is content[t + i mod n] @
    maps[i] (maps: (blocks, E - n, E / blocks))."""
    content = torch.randn(batch, n, d_model - n, generator=gen)
    positions = 4.0 * torch.eye(n).expand(batch, n, n)
    x = torch.cat([content, positions], dim=-1)
    blocks = [torch.roll(content, -i, dims=1) @ maps[i] for i in range(len(maps))]
    return x, torch.cat(blocks, dim=-1)


def fit_offsets(
    num_heads: int,
    *,
    blocks: int,
    n: int = 11,
    d_model: int = 32,
    steps: int = 400,
    batch: int = 64,
    lr: float = 0.01,
    seed: int = 0,
) -> float:
    """Relative error (MSE / target power, on 512 held-out sequences) of one attention layer of
    ``num_heads`` heads of d_model / num_heads trained on the ``blocks``-offset copy task.
    """
    if d_model <= n or d_model % blocks:
        raise ValueError(f"d_model={d_model} must exceed n={n} and be divisible by {blocks}")
    gen = torch.Generator().manual_seed(seed)
    width = d_model - n
    maps = torch.randn(blocks, width, d_model // blocks, generator=gen) * width**-0.5
    torch.manual_seed(seed)
    layer = MultiHeadAttention(d_model, num_heads, batch_first=True)
    opt = torch.optim.Adam(layer.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        x, y = offset_batch(batch, n, d_model, maps, gen)
        out, _ = layer(x, x, x, need_weights=False)
        loss = (out - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    x, y = offset_batch(512, n, d_model, maps, gen)
    with torch.no_grad():
        out, _ = layer(x, x, x, need_weights=False)
    return float((out - y).square().mean() / y.square().mean())


# ----------------------------------------------------------------- the measurement
@dataclass(frozen=True)
class ExpressivityRequest:
    """Sizes of ``measure_expressivity``; the defaults run in about a minute on 2 cores."""

    seq_lens: tuple[int, ...] = (8, 16)
    head_dims: tuple[int, ...] = (1, 2, 4, 8, 16)
    targets: int = 3
    steps: int = 600
    d_model: int = 32
    heads: int = 4
    offset_seq_len: int = 11
    offset_steps: int = 400
    seed: int = 0

    def __post_init__(self) -> None:
        """ValueError naming the field, before any fit: each bound written once (the CLI's
        options are these fields)."""
        object.__setattr__(self, "seq_lens", check_sizes("seq_lens", self.seq_lens, high=512))
        object.__setattr__(self, "head_dims", check_sizes("head_dims", self.head_dims, high=512))
        check_int("targets", self.targets, high=1000)
        check_int("steps", self.steps, high=10**6)
        check_int("heads", self.heads, high=32)
        check_seed("seed", self.seed)

    def fits_total(self, model_lengths: int = 0) -> int:
        """Fits of ``measure_expressivity`` (the total of its ``on_step``): every head size on
        each length's random targets and on ``model_lengths`` lengths of a model's patterns,
        then the two offset fits."""
        return (len(self.seq_lens) + model_lengths) * len(self.head_dims) + 2


def measure_expressivity(
    config: ExpressivityRequest | None = None,
    *,
    model_patterns: dict[int, np.ndarray] | None = None,
    model_name: str = "model",
    on_step: Callable[[int, int], None] | None = None,
) -> ExpressivityResult:
    """The rank rows for every (seq_len, head_dim) on random targets (and on ``model_patterns``:
    seq_len -> (count, n, n) trained heads' attention), then the pattern rows for 1 head of
    d_model and ``heads`` heads of d_model / heads. ``on_step(done, total)`` reports progress.
    """
    config = config or ExpressivityRequest()
    with one_torch_thread():  # small matrices: one thread is faster on shared cores
        return _measure(config, model_patterns, model_name, on_step)


def _measure(
    config: ExpressivityRequest,
    model_patterns: dict[int, np.ndarray] | None,
    model_name: str,
    on_step: Callable[[int, int], None] | None,
) -> ExpressivityResult:
    if config.d_model % config.heads:
        raise ValueError(f"d_model={config.d_model} is not divisible by heads={config.heads}")
    sources: list[tuple[str, int, np.ndarray]] = [
        ("random", n, random_targets(n, config.targets, config.seed + n)) for n in config.seq_lens
    ]
    for n, pats in sorted((model_patterns or {}).items()):
        sources.append((model_name, n, pats))
    total = config.fits_total(len(model_patterns or {}))
    done = 0
    rank: list[RankRow] = []
    for source, n, targets in sources:
        for d in config.head_dims:
            kls = fit_patterns(targets, d, steps=config.steps, seed=config.seed)
            rank.append(_rank_row(source, n, d, kls.tolist()))
            done += 1
            if on_step:
                on_step(done, total)
    patterns: list[PatternRow] = []
    for h in (1, config.heads):
        err = fit_offsets(
            h,
            blocks=config.heads,
            n=config.offset_seq_len,
            d_model=config.d_model,
            steps=config.offset_steps,
            seed=config.seed,
        )
        patterns.append(
            PatternRow(
                num_heads=h,
                head_dim=config.d_model // h,
                blocks=config.heads,
                seq_len=config.offset_seq_len,
                relative_error=err,
            )
        )
        done += 1
        if on_step:
            on_step(done, total)
    return ExpressivityResult(config=asdict(config), rank=rank, patterns=patterns)


def _rank_row(source: str, n: int, d: int, kls: Sequence[float]) -> RankRow:
    return RankRow(
        source=source,
        seq_len=n,
        head_dim=d,
        kl=float(np.mean(kls)),
        kl_std=float(np.std(kls)),
        targets=len(kls),
    )
