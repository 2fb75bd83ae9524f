"""The report as ``headlab report`` makes it: measure through the library, then build from the
measurements and the results files (the report itself measures nothing)."""

from __future__ import annotations

from headlab.analysis.report_measuring import measure_report
from headlab.report import build_report
from headlab.report.sections import Collected, collect


def build(out, options, **kwargs):
    """``build_report`` after ``measure_report(options)``; returns index.html's path."""
    return build_report(out, options, measure_report(options), **kwargs)


def collect_measured(options, **kwargs) -> Collected:
    """``collect`` after ``measure_report(options)``."""
    return collect(options, measure_report(options), **kwargs)
