"""Window errors are relative errors, not shares: where one above 1 is printed or drawn, its
label says what it is (1.70 was labelled "share of the output lost")."""

from __future__ import annotations

import dataclasses
import io

from long_results import long_context_result
from rich.console import Console

from headlab.cli.role_tables import role_tables
from headlab.heads.roles import head_roles
from headlab.report.long_context_figures import roles_figure


def _above_one():
    result = long_context_result()
    errors = [list(row) for row in result.roles.window_error]
    errors[3][2] = 1.7  # farther from the full output than no output
    roles = head_roles(
        sinks=4,
        window=256,
        first=result.statistics.metrics["first"],
        window_error=errors,
        copy_weight=result.roles.copy_weight,
        retrieval_hits=None,
        copies=83,
        kv_heads_per_layer=[3] * 30,
        no_window="",
    )
    return dataclasses.replace(result, roles=roles)


def test_the_cli_says_relative_error_not_share():
    screen = io.StringIO()
    Console(file=screen, width=80).print(*role_tables(_above_one().roles))
    shown = " ".join(screen.getvalue().split())
    assert "share of the output lost" not in shown
    assert "||o - o_window|| / ||o||" in shown and "above 1: farther from the full output" in shown


def test_the_figure_title_gives_the_largest_error_past_the_colour_scale():
    titles = [ax.get_title() for ax in roles_figure(_above_one()).axes]
    window = next(t for t in titles if t.startswith("window error"))
    assert "||o - o_w|| / ||o||" in window and "up to 1.70; colours stop at 1" in window
    plain = [ax.get_title() for ax in roles_figure(long_context_result()).axes]
    assert not any("colours stop" in t for t in plain)  # every error below 1: nothing to say
