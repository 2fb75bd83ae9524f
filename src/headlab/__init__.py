"""headlab: exact, fast and inspectable multi-head attention.

The public names below are imported on first use (PEP 562), so that ``import headlab`` (and the
``headlab`` command's start, its ``--help``) does not pay for torch until it is needed.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "AttentionTrace": "headlab.attention",
    "MultiHeadAttention": "headlab.attention",
    "causal_mask": "headlab.attention",
    "Comparison": "headlab.analysis",
    "compare": "headlab.analysis",
    "explain": "headlab.analysis",
    "gradient_coupling": "headlab.analysis",
    "head_gradient_norms": "headlab.analysis",
    "parameter_count": "headlab.analysis",
    "parameter_table": "headlab.analysis",
    "attach": "headlab.models.hf",
}
__all__ = sorted(_WHERE)
#: The packages, reachable as attributes after ``import headlab`` (``headlab.models.load``).
SUBPACKAGES = (
    "analysis",
    "attention",
    "circuits",
    "experiments",
    "heads",
    "models",
    "reference",
    "report",
    "results",
)

if TYPE_CHECKING:  # pragma: no cover
    from headlab.analysis import (
        Comparison as Comparison,
    )
    from headlab.analysis import (
        compare as compare,
    )
    from headlab.analysis import (
        explain as explain,
    )
    from headlab.analysis import (
        gradient_coupling as gradient_coupling,
    )
    from headlab.analysis import (
        head_gradient_norms as head_gradient_norms,
    )
    from headlab.analysis import (
        parameter_count as parameter_count,
    )
    from headlab.analysis import (
        parameter_table as parameter_table,
    )
    from headlab.attention import AttentionTrace as AttentionTrace
    from headlab.attention import MultiHeadAttention as MultiHeadAttention
    from headlab.attention import causal_mask as causal_mask
    from headlab.models.hf import attach as attach


def __getattr__(name: str) -> Any:
    if name in SUBPACKAGES:
        return importlib.import_module(f"headlab.{name}")
    if name not in _WHERE:
        raise AttributeError(f"module 'headlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, *SUBPACKAGES})


def _show_results_in_ipython() -> None:
    """In a running IPython (a notebook's kernel), every results type shows as its display
    (``headlab.report.displays``); elsewhere nothing is imported."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and hasattr(shell, "display_formatter"):
        from headlab.report.displays.show_display import register_formatters

        register_formatters(shell)


_show_results_in_ipython()
