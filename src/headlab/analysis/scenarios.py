"""The seed questions' set-ups, built from a typed config, and their measured answers.

``CompareRequest`` defaults reproduce the first seed question (000/001 in shared/seeds): W_Q, W_K,
W_V drawn like ``torch.rand(512, 512)`` and used as ``x @ W``, input ``torch.rand(2, 10, 512)``,
8 heads against 1, no output projection (W_O = identity, no biases).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from headlab.analysis.compare import Comparison, compare
from headlab.analysis.explain import explain
from headlab.attention.module import MultiHeadAttention
from headlab.attention.one_thread import one_torch_thread
from headlab.attention.sizes import FREE_HEAD_DIM, check_divides
from headlab.limits import check_fits, check_int, check_seed
from headlab.results.defaults import INITS
from headlab.results.draw_summary import DrawSummary
from headlab.results.scenario_result import ScenarioResult

# What torch adds on the first autograd call and the allocator keeps (measured: about 90 MiB at
# seq_len 500, see docs/answers.md).
COMPARE_OVERHEAD = 128 * 2**20


@dataclass(frozen=True)
class CompareRequest:
    """One comparison: a module with ``heads`` heads against its own weights viewed with
    ``vs_heads``.

    init: "rand" (U(0,1) like torch.rand, the first seed question; input U(0,1)), "normal"
    (N(0, 1/d_model), a properly scaled draw; input N(0,1)), "xavier" (torch's default init;
    input N(0,1)), "ones" (every weight and bias 1, through torch's packed in_proj and out_proj,
    as in seed 003; input U(0,1)). Without an output projection W_O is the identity and no
    biases are used (the seed's code has neither); with it, W_O and biases follow ``init``.
    kv_heads and head_dim are those of ``MultiHeadAttention`` (None: ``heads`` K/V heads of
    d_model / heads); the ``vs_heads`` view splits the same widths (``with_num_heads``).
    """

    d_model: int = 512
    heads: int = 8
    vs_heads: int | None = 1  # None: the fewest heads that split the K/V width (1 without GQA)
    seq_len: int = 10
    batch: int = 2
    init: str = "rand"
    seed: int = 0
    output_projection: bool = False
    causal: bool = False
    kv_heads: int | None = None
    head_dim: int | None = None

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        for name in ("d_model", "heads", "seq_len", "batch"):
            check_int(name, getattr(self, name))
        check_seed("seed", self.seed)
        for name in ("kv_heads", "head_dim"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        if self.head_dim is None:
            check_divides("d_model", self.d_model, "heads", self.heads, FREE_HEAD_DIM)
        if self.kv_heads is not None:
            check_divides("heads", self.heads, "kv_heads", self.kv_heads)
        q_dim = self.q_dim
        kv_dim = (self.kv_heads or self.heads) * (q_dim // self.heads)
        if self.vs_heads is None:
            object.__setattr__(self, "vs_heads", vs_head_counts(q_dim, kv_dim)[0])
        check_int("vs_heads", self.vs_heads)
        check_divides("query width", q_dim, "vs_heads", self.vs_heads, "heads x head size")
        if kv_dim % (q_dim // self.vs_heads):
            counts = vs_head_counts(q_dim, kv_dim)
            more = ", ..." if len(counts) > 6 else ""
            raise ValueError(
                f"vs_heads={self.vs_heads} gives heads of {q_dim // self.vs_heads}, which do not "
                f"split the K/V width {kv_dim} (kv_heads x head size); vs_heads can be "
                f"{', '.join(map(str, counts[:6]))}{more}"
            )
        if q_dim != self.d_model and not self.output_projection:
            raise ValueError(
                f"heads={self.heads} of head_dim={self.head_dim} give width {q_dim}, not "
                f"d_model={self.d_model}: set output_projection (W_O maps it back)"
            )

    @property
    def q_dim(self) -> int:
        """Width of the query projection: heads x head size."""
        return self.heads * (self.head_dim or self.d_model // self.heads)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def memory_terms(self) -> dict[str, int]:
        """The estimate's parts in bytes, each keyed by the advice that lowers it; fitted to
        measurements (docs/answers.md, "Memory"). Attention: counted as if both sides kept their
        scores and weights, one (batch, q_pos, k_pos) float32 matrix per head each, and about
        two more per head of the larger side: the findings' masks and one-head temporaries and
        what the allocator keeps of them. Since issue 31 a side's scores are dropped once read
        (``findings.side_facts``), so this is an upper bound (1.4 to 1.6x the measured peak).
        The gradients go a block of query rows at a time (``analysis.row_gradients``) and add
        little. Positions: the traces' per-head
        contributions (batch, head, q_pos, d_model) and the inputs and outputs. Weights:
        parameters and gradients."""
        t, b, d, q = self.seq_len, self.batch, self.d_model, self.q_dim
        heads = self.heads + self.vs_heads
        matrices = 2 * heads + 2 * max(self.heads, self.vs_heads)
        width = (
            f"d_model={d}" if self.head_dim is None else f"d_model={d} or head_dim={self.head_dim}"
        )
        lower = f"seq_len={t} or batch={b}"
        return {
            f"lower {lower} (attention matrices)": matrices * 4 * b * t * t,
            f"lower {lower} or {width} (per-position states)": 4 * b * t * (d * heads + 16 * q),
            f"lower {width} (the weights: {q} x {d} per projection)": 12 * 4 * d * q,
        }

    def memory_estimate(self) -> int:
        """Bytes that ``run_setup`` adds at its peak (resident memory): ``memory_terms`` and
        what torch allocates on its first autograd call."""
        return sum(self.memory_terms().values()) + COMPARE_OVERHEAD


def vs_head_counts(q_dim: int, kv_dim: int) -> list[int]:
    """The head counts, fewest first, that view a query width ``q_dim`` and a K/V width
    ``kv_dim`` (kv_dim divides q_dim) with one head size: q_dim / s for each divisor s of
    kv_dim. Without GQA (equal widths) that is every divisor of q_dim, from 1."""
    sizes = {
        d for i in range(1, math.isqrt(kv_dim) + 1) if kv_dim % i == 0 for d in (i, kv_dim // i)
    }
    return sorted(q_dim // size for size in sizes)


def build(setup: CompareRequest) -> tuple[MultiHeadAttention, MultiHeadAttention, Tensor]:
    """(module with ``heads``, the same parameters viewed with ``vs_heads``, input
    (batch, pos, d_model)), all float32, batch first, deterministic in ``seed``.

    ValueError before anything is allocated when the set-up's estimate does not fit in memory.
    """
    check_fits(
        f"seq_len={setup.seq_len} with batch={setup.batch} and d_model={setup.d_model}",
        setup.memory_estimate(),
        max((size, advice) for advice, size in setup.memory_terms().items())[1],
    )
    e = setup.d_model
    gen = torch.Generator().manual_seed(setup.seed)
    bias = setup.output_projection
    module = MultiHeadAttention(
        e,
        setup.heads,
        bias=bias,
        batch_first=True,
        num_kv_heads=setup.kv_heads,
        head_dim=setup.head_dim,
    )
    w_q, w_k, w_v = module.projection_weights()
    with torch.no_grad():
        if setup.init == "rand":
            widths = (w_q.shape[0], w_k.shape[0], w_v.shape[0])
            drawn = [torch.rand(e, width, generator=gen) for width in widths]
            # The seed computes x @ W; torch's layout stores W^T.
            module.in_proj_weight.copy_(torch.cat([w.T for w in drawn]))
            module.out_proj.weight.copy_(torch.rand(e, w_q.shape[0], generator=gen))
        elif setup.init == "normal":
            module.in_proj_weight.normal_(0.0, e**-0.5, generator=gen)
            module.out_proj.weight.normal_(0.0, e**-0.5, generator=gen)
        elif setup.init == "xavier":
            torch.nn.init.xavier_uniform_(module.in_proj_weight, generator=gen)
            torch.nn.init.xavier_uniform_(module.out_proj.weight, generator=gen)
        else:
            for p in module.parameters():
                p.fill_(1.0)
        if bias and setup.init != "ones":
            module.in_proj_bias.zero_()
            module.out_proj.bias.zero_()
        if not setup.output_projection:
            module.out_proj.weight.copy_(torch.eye(e))
    draw = torch.rand if setup.init in ("rand", "ones") else torch.randn
    x = draw(setup.batch, setup.seq_len, e, generator=gen)
    return module, module.with_num_heads(setup.vs_heads), x


def run_setup(setup: CompareRequest) -> Comparison:
    """Build the set-up and compare the two head counts on its input."""
    a, b, x = build(setup)
    return compare(a, b, x, is_causal=setup.causal)


SEED_QUESTIONS = (
    (
        "rand",
        "Is multi-head attention with h=8, d_k=64 the same as single-head attention with "
        "d_k=512 when the weights are the same? (One asker ran it with torch.rand weights and "
        "got tensor(True).)",
        "headlab compare",
        {},
    ),
    (
        "ones",
        "Does the number of heads change the output at all? (All-ones weights in "
        "torch.nn.MultiheadAttention gave the same result for every head count.)",
        "headlab compare --init ones --output-projection",
        {"init": "ones", "output_projection": True},
    ),
    (
        "scaled",
        "So is it just a logical split that changes nothing? (Weights drawn at a sensible "
        "scale, as a trained or freshly initialised model has them.)",
        "headlab compare --init normal --output-projection",
        {"init": "normal", "output_projection": True},
    ),
)


def seed_comparisons(seed: int = 0, draws: int = 0) -> list[tuple[ScenarioResult, Comparison]]:
    """The three seed scenarios, each compared and explained from its own measurements, beside
    the ``Comparison`` it was reduced from (its tensors: the page draws both sides' weights);
    with ``draws``, each set-up is also compared for seeds 0 .. draws - 1 (``over_draws``). On
    one torch thread while another process competes for the cores: the set-ups are 8 x 16
    matrices (``one_torch_thread``)."""
    with one_torch_thread(when_busy=True):
        return _seed_comparisons(seed, draws)


def _seed_comparisons(seed: int, draws: int) -> list[tuple[ScenarioResult, Comparison]]:
    measured = []
    for name, question, command, overrides in SEED_QUESTIONS:
        setup = CompareRequest(seed=seed, **overrides)
        comparison = run_setup(setup)
        result = comparison.result()
        summary = over_draws(overrides, range(draws)) if draws else None
        scenario = ScenarioResult(
            name, question, command, setup.to_dict(), result, explain(result), summary
        )
        measured.append((scenario, comparison))
    return measured


def run_seed_scenarios(seed: int = 0, draws: int = 0) -> list[ScenarioResult]:
    """The three seed scenarios' results (``seed_comparisons`` without the measurements)."""
    return [scenario for scenario, _ in seed_comparisons(seed, draws)]


def over_draws(overrides: dict, seeds: range = range(10)) -> DrawSummary:
    """Compare the set-up ``CompareRequest(seed=s, **overrides)`` for every seed in ``seeds``:
    which draws come out identical, and which finding explains the most rows of each draw."""
    identical, findings = [], {}
    for seed in seeds:
        result = run_setup(CompareRequest(seed=seed, **overrides)).result()
        if result.identical:
            identical.append(seed)
        if result.top_code is not None:
            findings[result.top_code] = findings.get(result.top_code, 0) + 1
    return DrawSummary(list(seeds), identical, findings)


def __getattr__(name: str) -> object:
    """``CompareSetup``, the old name of ``CompareRequest`` (deprecated; docs name the new one)."""
    from headlab.notices import renamed

    return renamed(__name__, name, {"CompareSetup": CompareRequest})
