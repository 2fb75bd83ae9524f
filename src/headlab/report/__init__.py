"""The report: one self-contained HTML page (and PNG figures) that shows the heads."""

from headlab.report.build import build_report, render, safe_json
from headlab.report.sections import DEFAULT_TEXT, ReportOptions

__all__ = ["DEFAULT_TEXT", "ReportOptions", "build_report", "render", "safe_json"]
