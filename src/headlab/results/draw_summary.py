"""One compare set-up over several draws of its weights and input (``headlab.analysis.scenarios
.over_draws``): which seeds came out identical and which finding explained the most rows."""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.schema import Fields, problem


@dataclass(frozen=True)
class DrawSummary:
    """One set-up over several seeds (draws of its weights and input).

    seeds: the seeds drawn; identical: those whose two sides came out bit-identical;
    findings: finding code -> how many draws it explained most rows of.
    """

    seeds: list[int]
    identical: list[int]
    findings: dict[str, int]

    @property
    def share_identical(self) -> float:
        return len(self.identical) / len(self.seeds)

    def sentence(self) -> str:
        """What the draws say, in words, from the counts."""
        n, k = len(self.seeds), len(self.identical)
        first, last = self.seeds[0], self.seeds[-1]
        which = f" (seeds {', '.join(map(str, self.identical))})" if 0 < k < n else ""
        outcome = (
            "so the answer depends on the draw, not on the head count alone"
            if 0 < k < n
            else "in every draw"
            if k == n
            else "in none of them"
        )
        top = ", ".join(f"{code} in {count}" for code, count in sorted(self.findings.items()))
        return (
            f"Over {n} draws of this set-up (seeds {first} to {last}), {k} came out identical"
            f"{which}: {outcome}. The finding that explains the most rows, per draw: {top}."
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "seeds": self.seeds,
            "identical": self.identical,
            "share_identical": self.share_identical,
            "findings": self.findings,
            "sentence": self.sentence(),
        }

    @classmethod
    def from_dict(cls, f: Fields) -> DrawSummary:
        """ValueError naming the field unless the seeds are distinct non-negative integers, the
        identical ones among them and the counts of the findings add up to the draws (the
        share and the sentence are derived, so not read)."""
        seeds = [_seed(f, "seeds", i, v) for i, v in enumerate(f.list("seeds", nonempty=True))]
        identical = [_seed(f, "identical", i, v) for i, v in enumerate(f.list("identical"))]
        for i, seed in enumerate(identical):
            if seed not in seeds:
                raise problem(f"{f.at('identical')}[{i}]", "one of the seeds", seed)
        counts = f.object("findings")
        findings = {code: counts.int(code, 1, len(seeds)) for code in counts.data}
        if sum(findings.values()) > len(seeds):
            raise problem(f.at("findings"), f"at most {len(seeds)} draws in all", findings)
        return cls(seeds, identical, findings)


def _seed(f: Fields, key: str, i: int, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise problem(f"{f.at(key)}[{i}]", "a seed (an integer >= 0)", value)
    return value
