"""The display of node scores (``NodeScores``: ``headlab circuits --method nodes | nodes-ig |
head-patching``): every query head on a layers x heads grid, each layer's K/V groups and MLP in
columns beside it, coloured by the score's sign and size, and the strongest nodes in a table."""

from __future__ import annotations

from headlab.report.displays.display_bundle import Display
from headlab.results.node_scores import NodeScores, parse_node

#: Nodes the table lists, strongest first.
TABLE_ROWS = 20


def node_display(scores: NodeScores) -> Display:
    """Every scored node of ``scores`` (the by-position table, when measured, stays in the
    file: the display shows each node's whole score)."""
    cells = []
    for name, value in zip(scores.nodes, scores.scores, strict=True):
        kind, layer, index = parse_node(name)  # from_dict checked every name
        cells.append([kind[0], layer, index, value])
    data = {
        "model": scores.model,
        "method": scores.method,
        "metric": scores.metric,
        "task": scores.task,
        "heads_per_layer": scores.heads_per_layer,
        "kv_heads_per_layer": scores.kv_heads_per_layer,
        "clean": scores.clean_metric,
        "corrupted": scores.corrupted_metric,
        "nodes": scores.nodes,
        "cells": cells,
        "top": [[name, value] for name, value in scores.top(TABLE_ROWS)],
    }
    return Display("nodes", data, repr(scores), "display-nodes")
