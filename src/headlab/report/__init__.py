"""The report: one self-contained HTML page (and PNG figures) that shows the heads.

It renders and measures nothing: ``headlab.analysis.report_measuring.measure_report`` measures
what the page shows beside the results files, and ``build_report`` draws the page from that and
from the results folder. ``ReportRequest`` is the results layer's (``headlab.results``), named here
because every caller of ``build_report`` needs it.
"""

from headlab.report.build import build_report, check_targets, render, safe_json
from headlab.results.defaults import DEFAULT_TEXT
from headlab.results.report_measurements import ReportRequest

__all__ = ["DEFAULT_TEXT", "ReportRequest", "build_report", "check_targets", "render", "safe_json"]


def __getattr__(name: str) -> object:
    """``ReportOptions``, the old name of ``ReportRequest`` (deprecated; docs name the new one)."""
    from headlab.notices import renamed

    return renamed(__name__, name, {"ReportOptions": ReportRequest})
