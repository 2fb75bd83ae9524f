"""What a user meets first, in a notebook: the packages as attributes of ``headlab``, the public
names of ``headlab.circuits``, requests that work with their defaults, reprs that summarise, and
``headlab.attach`` saying that it switches the model's attention."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest
from hf_families import build

import headlab
import headlab.circuits as circuits
from headlab.notices import AttentionSwitched, HeadlabWarning


def test_the_packages_are_attributes_of_headlab_in_a_fresh_interpreter():
    code = (
        "import headlab; print(headlab.models.load.__module__, "
        "headlab.circuits.Patcher.__name__, 'models' in dir(headlab))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0].startswith("headlab.models") and out[1:] == ["Patcher", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        headlab.nothing  # noqa: B018


@pytest.mark.parametrize("name", circuits.__all__)
def test_every_public_name_of_circuits_is_its_modules_object(name):
    # Every submodule imported first, as other tests and a user's session do: a public name
    # that is also a submodule's name would then be the module, not the function.
    for module_name in set(circuits._WHERE.values()):
        importlib.import_module(f"headlab.circuits.{module_name}")
    module = importlib.import_module(f"headlab.circuits.{circuits._WHERE[name]}")
    assert getattr(circuits, name) is getattr(module, name)


def test_a_composition_request_works_with_the_tasks_defaults():
    request = circuits.CircuitRequest(circuits.TaskRequest("induction"), method="composition")
    assert request.method == "composition" and request.task.task == "induction"
    with pytest.raises(ValueError, match="equal_lengths must be True for method eap"):
        circuits.CircuitRequest(circuits.TaskRequest("induction", equal_lengths=False))


def test_a_results_repr_is_a_summary_and_to_dict_keeps_everything():
    from headlab.results.circuit_edges import EdgeScores
    from headlab.results.circuit_run import CircuitRun
    from headlab.results.circuit_tasks import TaskPerformance

    edges = [f"{s}.{h}->{s + 1}.g{g}<k>" for s in range(29) for h in range(9) for g in range(3)]
    scores = EdgeScores("eap", "logprob", edges * 90, [0.125] * (len(edges) * 90), -1.5, -4.0)
    performance = TaskPerformance("induction", "logprob", 8, -1.5, -4.0, 0.5, True)
    run = CircuitRun(
        "SmolLM2-135M", "induction", "eap", None, 20, performance, [9] * 30, [3] * 30, scores
    )
    text = repr(run)
    assert len(text) < 1500, len(text)
    assert text.startswith("CircuitRun('SmolLM2-135M', induction, eap")
    assert f"{len(edges) * 90} edges" in text
    from headlab.results.summary_repr import summary

    short = summary(run.scores)  # the summary every results type without its own repr uses
    assert len(short) < 500 and f"<list of {len(edges) * 90}: '0.0->1.g0<k>'" in short
    assert len(run.to_dict()["scores"]["edges"]) == len(edges) * 90


def test_attach_says_once_that_it_switches_the_models_attention():
    from headlab.models.hf import attach

    model = build("llama")
    before = model.config._attn_implementation
    with pytest.warns(
        AttentionSwitched,
        match=rf"switched .* attention from {before} to "
        rf"headlab's .*set_attn_implementation\(\"{before}\"\)",
    ):
        attach(model)
    assert issubclass(AttentionSwitched, HeadlabWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttentionSwitched)
        attach(model)  # already on headlab's attention: nothing more to say
        attach(build("llama"), announce=False)
