"""Analyses on shared weights: comparisons, findings, per-head gradients, parameter counts."""

from headlab.analysis.params import ParamRow, parameter_count, parameter_table

__all__ = ["ParamRow", "parameter_count", "parameter_table"]
