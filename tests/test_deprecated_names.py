"""The requests renamed to ``...Request`` that docs/ showed under their old names still import
under them, with one DeprecationWarning naming the new name; other names are not invented."""

from __future__ import annotations

import importlib

import pytest

RENAMED = [
    ("headlab.analysis", "CompareSetup", "CompareRequest"),
    ("headlab.analysis.scenarios", "CompareSetup", "CompareRequest"),
    ("headlab.results.corpus_roles_result", "RoleOptions", "RoleRequest"),
    ("headlab.results.report_measurements", "ReportOptions", "ReportRequest"),
    ("headlab.report", "ReportOptions", "ReportRequest"),
]


@pytest.mark.parametrize(("module", "old", "new"), RENAMED)
def test_an_old_name_is_the_new_class_with_a_warning(module, old, new):
    found = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        assert getattr(found, old) is getattr(found, new)


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'CompareSpec'"):
        importlib.import_module("headlab.analysis").CompareSpec  # noqa: B018
