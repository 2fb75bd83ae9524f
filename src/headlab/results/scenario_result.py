"""A seed question answered (``headlab.analysis.scenarios.run_seed_scenarios``): the question, the
command that answers it, the set-up measured, the comparison's result and its explanation, and
optionally the same set-up over several draws."""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.comparison_result import ComparisonResult
from headlab.results.draw_summary import DrawSummary
from headlab.results.schema import Fields

WHERE = "scenario"


@dataclass(frozen=True)
class ScenarioResult:
    """A seed question, the command that answers it, and the measured answer.

    setup: the ``CompareRequest`` measured, as its ``to_dict`` gives it (plain data);
    comparison: its ``Comparison.result()``; explanation: ``explain`` of it; draws: the set-up
    over several seeds (None when not measured).
    """

    name: str
    question: str
    command: str
    setup: dict
    comparison: ComparisonResult
    explanation: str
    draws: DrawSummary | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "question": self.question,
            "command": self.command,
            "setup": dict(self.setup),
            "comparison": self.comparison.to_dict(),
            "explanation": self.explanation,
            "draws": None if self.draws is None else self.draws.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object, where: str = WHERE) -> ScenarioResult:
        """ValueError naming the field, the expected and the received value when ``data`` does
        not follow ``to_dict``'s schema. The comparison comes back without its sides."""
        f = Fields(data, where)
        draws = None
        if f.data.get("draws") is not None:
            draws = DrawSummary.from_dict(f.object("draws"))
        return cls(
            f.str("name"),
            f.str("question"),
            f.str("command"),
            dict(f.object("setup").data),
            ComparisonResult.from_dict(f.object("comparison").data, f.at("comparison")),
            f.str("explanation"),
            draws,
        )
