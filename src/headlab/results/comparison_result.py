"""What ``headlab compare`` measured, as plain data (``headlab.analysis.compare`` measures it:
``Comparison.result()``): the verdict, the findings row by row and the parameter counts, the
``headlab compare --json`` document, and the sizes of the two sides that the explanation reads.

The schema of the document is in docs/answers.md ("The ``--json`` document"); ``from_dict``
refuses a document that does not follow it, naming the field, the expected and the received value.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlab.results.schema import Fields, is_int, problem

VERDICTS = ("identical", "close", "different")
CODES = (
    "same_config",
    "single_key",
    "saturated_same_key",
    "uniform",
    "identical_values",
    "partition",
)
WHERE = "compare"  # where a schema message starts: ``compare.findings[0].code: ...``

Measure = int | float | bool | list[float] | None


def _is_float(value: object) -> bool:
    """A JSON number (int or float, not a bool), finite or not: a difference can overflow, and
    the ``--json`` printer refuses that itself, naming where."""
    return is_int(value) or isinstance(value, float)


def _is_measure(value: object) -> bool:
    if value is None or isinstance(value, bool) or _is_float(value):
        return True
    return isinstance(value, list) and all(_is_float(v) for v in value)


@dataclass(frozen=True)
class FindingRow:
    """One explanation of ``compare``: its code (one of ``CODES``), the share of query rows it
    covers, the sentence written from its measures (``headlab.analysis.explain.describe``) and
    the measures by name (``rows`` and ``of_rows`` for every code but same_config; None where a
    number is undefined, such as the gap between two keys when a row has one)."""

    code: str
    fraction: float
    detail: str
    measures: dict[str, Measure]

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "fraction": self.fraction,
            "detail": self.detail,
            "measures": self.measures,
        }

    @classmethod
    def from_dict(cls, f: Fields) -> FindingRow:
        code = f.get("code", f"one of {', '.join(CODES)}", lambda v: v in CODES)
        fraction = f.number("fraction", 0.0, 1.0)
        measures = f.object("measures")
        for name, value in measures.data.items():
            if not _is_measure(value):
                expected = "a number, true/false, a list of numbers or null"
                raise problem(measures.at(name), expected, value)
        return cls(code, fraction, f.str("detail"), dict(measures.data))


@dataclass(frozen=True)
class ComparedSides:
    """What the explanation reads beyond the ``--json`` document: each side's head count and
    head size, the query rows (batch x q_pos) and how many of them agree bit for bit, and the
    largest gradient difference of each shared parameter, by name."""

    heads_a: int
    head_dim_a: int
    heads_b: int
    head_dim_b: int
    rows: int
    equal_rows: int
    gradient_diffs: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        return {
            "heads_a": self.heads_a,
            "head_dim_a": self.head_dim_a,
            "heads_b": self.heads_b,
            "head_dim_b": self.head_dim_b,
            "rows": self.rows,
            "equal_rows": self.equal_rows,
            "gradient_diffs": dict(self.gradient_diffs),
        }

    @classmethod
    def from_dict(cls, f: Fields) -> ComparedSides:
        sizes = [f.size(name) for name in ("heads_a", "head_dim_a", "heads_b", "head_dim_b")]
        rows = f.int("rows")
        equal_rows = f.int("equal_rows", 0, rows)
        diffs = f.object("gradient_diffs")
        for name, value in diffs.data.items():
            if not _is_float(value):
                raise problem(diffs.at(name), "a number", value)
        return cls(*sizes, rows, equal_rows, {k: float(v) for k, v in diffs.data.items()})


@dataclass(frozen=True)
class ComparisonResult:
    """``compare``'s answer: verdict "identical" (bit for bit), "close" (within 1e3 machine
    epsilons) or "different"; the largest and the relative (Frobenius) output difference;
    whether the gradients of every shared parameter coincide for one upstream gradient; the
    findings, ranked by the share of rows they cover; the parameter count of each side
    ({"a", "b"}). sides: what the explanation reads beyond the document (not in ``to_dict``,
    so None for a result read back from a ``--json`` document)."""

    verdict: str
    identical: bool
    max_abs_diff: float
    rel_diff: float
    gradients_equal: bool
    findings: list[FindingRow]
    params: dict[str, int]
    sides: ComparedSides | None = None

    def to_dict(self) -> dict[str, object]:
        """The ``headlab compare --json`` document (docs/answers.md)."""
        return {
            "verdict": self.verdict,
            "identical": self.identical,
            "max_abs_diff": self.max_abs_diff,
            "rel_diff": self.rel_diff,
            "gradients_equal": self.gradients_equal,
            "findings": [f.to_dict() for f in self.findings],
            "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, data: object, where: str = WHERE) -> ComparisonResult:
        """The result of a ``--json`` document (sides None); ValueError naming the field, the
        expected and the received value when it does not follow the schema."""
        f = Fields(data, where)
        verdict = f.get("verdict", f"one of {', '.join(VERDICTS)}", lambda v: v in VERDICTS)
        identical = f.bool("identical")
        if identical != (verdict == "identical"):
            raise problem(
                f.at("identical"), f"{verdict == 'identical'} (verdict {verdict})", identical
            )
        differences = []
        for name in ("max_abs_diff", "rel_diff"):
            value = f.get(name, "a number >= 0", lambda v: _is_float(v) and not v < 0)
            differences.append(float(value))
        findings = [FindingRow.from_dict(row) for row in f.objects("findings")]
        params = f.object("params")
        counts = {side: params.int(side) for side in ("a", "b")}
        if set(params.data) != {"a", "b"}:
            raise problem(f.at("params"), 'the keys "a" and "b"', sorted(params.data))
        return cls(verdict, identical, *differences, f.bool("gradients_equal"), findings, counts)

    @property
    def top_code(self) -> str | None:
        """The code of the finding that covers the most rows (None without findings)."""
        if not self.findings:
            return None
        return max(self.findings, key=lambda f: f.fraction).code
