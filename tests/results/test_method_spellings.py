"""One spelling of the circuit methods, as ``circuits --method`` takes them: results are written
with "path-patching"; files written with the earlier "path_patching" still read, as the same
method."""

from __future__ import annotations

from headlab.results.circuit_edges import Agreement, EdgeScores, FaithfulnessCurve


def test_edge_scores_are_written_with_the_commands_spelling_and_read_old_files():
    written = EdgeScores("path_patching", "logit_diff", ["embed->logits"], [0.5], 2.0, -1.0)
    assert written.method == "path-patching"
    assert written.to_dict()["method"] == "path-patching"
    old = {**written.to_dict(), "method": "path_patching"}
    assert EdgeScores.from_dict(old) == written


def test_agreement_and_faithfulness_read_the_old_spelling():
    agreement = {
        "reference": "path_patching",
        "method": "eap",
        "edges": 7,
        "spearman": 0.9,
        "pearson": 0.8,
        "k": 3,
        "top_k_shared": 2,
    }
    assert Agreement.from_dict(agreement).reference == "path-patching"
    curve = {
        "method": "path_patching",
        "selection": "top",
        "metric": "logit_diff",
        "edges": 7,
        "fractions": [0.5],
        "sizes": [3],
        "faithfulness": [0.9],
        "random": [[0.1]],
        "cpr": 0.9,
        "cmd": 0.1,
        "random_cpr": [0.1],
        "random_cmd": [0.9],
    }
    assert FaithfulnessCurve.from_dict(curve).method == "path-patching"
