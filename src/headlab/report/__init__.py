"""The report: one self-contained HTML page (and PNG figures) that shows the heads.

It renders and measures nothing: ``headlab.analysis.report_measuring.measure_report`` measures
what the page shows beside the results files, and ``build_report`` draws the page from that and
from the results folder. ``ReportOptions`` is the results layer's (``headlab.results``), named here
because every caller of ``build_report`` needs it.
"""

from headlab.report.build import build_report, check_targets, render, safe_json
from headlab.results.defaults import DEFAULT_TEXT
from headlab.results.report_measurements import ReportOptions

__all__ = ["DEFAULT_TEXT", "ReportOptions", "build_report", "check_targets", "render", "safe_json"]
