"""The seed questions' set-ups, built from a typed config, and their measured answers.

``CompareSetup`` defaults reproduce the first seed question (000/001 in shared/seeds): W_Q, W_K,
W_V drawn like ``torch.rand(512, 512)`` and used as ``x @ W``, input ``torch.rand(2, 10, 512)``,
8 heads against 1, no output projection (W_O = identity, no biases).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from headlab.analysis.compare import Comparison, compare
from headlab.analysis.explain import explain
from headlab.attention.module import MultiHeadAttention
from headlab.defaults import INITS
from headlab.limits import check_fits, check_int, check_seed


@dataclass(frozen=True)
class CompareSetup:
    """One comparison: a module with ``heads`` heads against its own weights viewed with
    ``vs_heads``.

    init: "rand" (U(0,1) like torch.rand, the first seed question; input U(0,1)), "normal"
    (N(0, 1/d_model), a properly scaled draw; input N(0,1)), "xavier" (torch's default init;
    input N(0,1)), "ones" (every weight and bias 1, through torch's packed in_proj and out_proj,
    as in seed 003; input U(0,1)). Without an output projection W_O is the identity and no
    biases are used (the seed's code has neither); with it, W_O and biases follow ``init``.
    """

    d_model: int = 512
    heads: int = 8
    vs_heads: int = 1
    seq_len: int = 10
    batch: int = 2
    init: str = "rand"
    seed: int = 0
    output_projection: bool = False
    causal: bool = False

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        for name in ("d_model", "heads", "vs_heads", "seq_len", "batch"):
            check_int(f"--{name.replace('_', '-')}", getattr(self, name))
        check_seed("--seed", self.seed)
        for name in ("heads", "vs_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(
                    f"embed_dim={self.d_model} is not divisible by num_heads="
                    f"{getattr(self, name)} (--{name.replace('_', '-')})"
                )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def memory_estimate(self) -> int:
        """Bytes at the peak of ``run_setup``: per side a trace of scores and weights (float32),
        the backward's copies of them, the findings' (batch, q_pos, k_pos) checks, the weights."""
        t, b, e = self.seq_len, self.batch, self.d_model
        attention = 4 * b * (self.heads + self.vs_heads) * t * t * 4
        return attention + 2 * 4 * e * e * 4 * 3 + 16 * b * t * e * 4


def build(setup: CompareSetup) -> tuple[MultiHeadAttention, MultiHeadAttention, Tensor]:
    """(module with ``heads``, the same parameters viewed with ``vs_heads``, input
    (batch, seq_len, d_model)), all float32, batch first, deterministic in ``seed``.

    ValueError before anything is allocated when the set-up's estimate does not fit in memory.
    """
    check_fits(
        f"--seq-len {setup.seq_len} with --batch {setup.batch} and --d-model {setup.d_model}",
        setup.memory_estimate(),
        "lower --seq-len or --batch",
    )
    e = setup.d_model
    gen = torch.Generator().manual_seed(setup.seed)
    bias = setup.output_projection
    module = MultiHeadAttention(e, setup.heads, bias=bias, batch_first=True)
    with torch.no_grad():
        if setup.init == "rand":
            w_q, w_k, w_v = (torch.rand(e, e, generator=gen) for _ in range(3))
            # The seed computes x @ W; torch's layout stores W^T.
            module.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))
            module.out_proj.weight.copy_(torch.rand(e, e, generator=gen))
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


def run_setup(setup: CompareSetup) -> Comparison:
    """Build the set-up and compare the two head counts on its input."""
    a, b, x = build(setup)
    return compare(a, b, x, is_causal=setup.causal)


@dataclass(frozen=True)
class ScenarioResult:
    """A seed question, the command that answers it, and the measured answer."""

    name: str
    question: str
    command: str
    setup: CompareSetup
    comparison: Comparison
    explanation: str

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "question": self.question,
            "command": self.command,
            "setup": self.setup.to_dict(),
            "comparison": self.comparison.to_dict(),
            "explanation": self.explanation,
        }


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


def run_seed_scenarios(seed: int = 0) -> list[ScenarioResult]:
    """The three seed scenarios, each compared and explained from its own measurements."""
    results = []
    for name, question, command, overrides in SEED_QUESTIONS:
        setup = CompareSetup(seed=seed, **overrides)
        comparison = run_setup(setup)
        results.append(
            ScenarioResult(name, question, command, setup, comparison, explain(comparison))
        )
    return results
