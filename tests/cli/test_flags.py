"""Library errors name the library's arguments; the CLI maps them to its flags (cli.parsing)."""

from __future__ import annotations

import pytest

from headlab.cli.parsing import as_flags, flags


def test_arguments_become_flags_where_they_are_named():
    names = {"d_model": "--d-model", "heads": "--heads", "head_dim": "--head-dim"}
    message = "d_model=512 is not divisible by heads=7 (pass head_dim= to choose the size)"
    assert as_flags(message, names) == (
        "--d-model 512 is not divisible by --heads 7 (pass --head-dim to choose the size)"
    )
    # a plain word is left alone unless it starts the message
    assert as_flags("heads must list one head count; 3 heads", names) == (
        "--heads must list one head count; 3 heads"
    )
    # a field of a results file is not an argument, even when it has an argument's name
    field = "r.json: model-collapse.all_layers[0].num_heads: expected an integer <= 9"
    assert as_flags(field, {"num_heads": "--heads"}) == field


def test_flags_keeps_the_error_type_and_maps_the_library_aliases():
    from headlab.analysis.scenarios import CompareRequest
    from headlab.attention.sizes import resolve_head_sizes
    from headlab.models import load

    refused = pytest.raises(ValueError, match=r"^--d-model 12 is not divisible by --heads 5")
    with refused, flags():
        resolve_head_sizes(12, 5, None, None)
    refused = pytest.raises(ValueError, match=r"^--heads 8 is not divisible by --kv-heads 3$")
    with refused, flags("heads", "kv_heads"):
        CompareRequest(kv_heads=3)
    with pytest.raises(FileNotFoundError, match=r"^--model must be one of"), flags("model"):
        load("/no/such/model")


def test_library_errors_name_no_flags():
    from headlab.analysis.scenarios import CompareRequest
    from headlab.experiments.sweep import SweepRequest, expand_grid

    for make in (lambda: CompareRequest(heads=3), lambda: expand_grid(SweepRequest(heads=(3,)))):
        with pytest.raises(ValueError) as error:
            make()
        assert "--" not in str(error.value) and "heads=3" in str(error.value)
