"""Analyses on shared weights: comparisons and their findings, gradients per head, parameter counts."""

from headlab.analysis.params import ParamRow, parameter_count, parameter_table

__all__ = ["ParamRow", "parameter_count", "parameter_table"]
