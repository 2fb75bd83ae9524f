"""Analyses on shared weights: comparisons, findings, per-head gradients, parameter counts."""

from headlab.analysis.compare import Comparison, compare
from headlab.analysis.coupling import coupling_summary, gradient_coupling, head_gradient_norms
from headlab.analysis.explain import explain
from headlab.analysis.findings import Finding
from headlab.analysis.params import parameter_count, parameter_table
from headlab.analysis.scenarios import CompareRequest, build, run_seed_scenarios, run_setup
from headlab.results.comparison_result import CODES, ComparisonResult, FindingRow
from headlab.results.coupling_result import CouplingMatrix, CouplingSummary, HeadGradientNorms
from headlab.results.param_rows import ParamRow
from headlab.results.scenario_result import ScenarioResult

__all__ = [
    "CODES",
    "CompareRequest",
    "Comparison",
    "ComparisonResult",
    "CouplingMatrix",
    "CouplingSummary",
    "Finding",
    "FindingRow",
    "HeadGradientNorms",
    "ParamRow",
    "ScenarioResult",
    "build",
    "compare",
    "coupling_summary",
    "explain",
    "gradient_coupling",
    "head_gradient_norms",
    "parameter_count",
    "parameter_table",
    "run_seed_scenarios",
    "run_setup",
]


def __getattr__(name: str) -> object:
    """``CompareSetup``, the old name of ``CompareRequest`` (deprecated; docs name the new one)."""
    from headlab.notices import renamed

    return renamed(__name__, name, {"CompareSetup": CompareRequest})
