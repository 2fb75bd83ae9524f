"""Every command's tables read on an 80-column terminal: split, never a number cut to ``2.…``."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console

import cli_run
from headlab.cli.tables import column_groups, fitted_tables

ELLIPSIS = "…"


def render(tables, width=80) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(*tables)
    return console.file.getvalue()


def run(argv, capsys):
    """stdout of a command that must succeed."""
    code, out, err = cli_run.run(argv, capsys)
    assert code == 0, err
    return out


@pytest.mark.parametrize(("layers", "heads"), [(6, 12), (30, 9), (2, 16), (1, 32)])
def test_a_layers_by_heads_grid_shows_every_number_whole(layers, heads):
    rng = random.Random(layers * heads)
    values = [[rng.uniform(-20, 20) for _ in range(heads)] for _ in range(layers)]
    cells = [[str(i), *(f"{v:.2f}" for v in row)] for i, row in enumerate(values)]
    tables = fitted_tables("entropy per head", ["layer", *(f"h{h}" for h in range(heads))], cells)
    text = render(tables)
    assert ELLIPSIS not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for row in cells:
        for cell in row[1:]:
            assert text.count(f" {cell} ") >= 1, cell


def test_column_groups_cover_each_column_once_and_even_out():
    widths = [5] + [5] * 12  # layer + 12 heads of "-2.53"
    groups = column_groups(widths, keys=1, width=80)
    assert sorted(i for g in groups for i in g) == list(range(1, 13))
    assert [len(g) for g in groups] == [6, 6]
    assert column_groups([5, 5, 5], keys=1, width=200) == [[1, 2]]


@pytest.fixture
def columns_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def test_model_commands_fit_80_columns(columns_80, tiny_dir, tmp_path, capsys):
    base = ["--model-dir", str(tiny_dir), "--n-texts", "4", "--force"]
    for command in ("heads", "collapse", "importance", "prune"):
        out = run(["model", command, *base, "--out", str(tmp_path / f"{command}.json")], capsys)
        assert ELLIPSIS not in out, (command, out)
    argv = ["model", "ablate", "--ablate", "0.1,1.2", *base, "--out", str(tmp_path / "a.json")]
    out = run(argv, capsys)
    assert ELLIPSIS not in out
    # one table, the objective a sentence below it (as a column it split the table in three)
    assert "(1/" not in out and "\nobjective: in-batch InfoNCE between the two halves" in out


def test_compare_grad_params_fit_80_columns(columns_80, capsys):
    assert ELLIPSIS not in run(["compare"], capsys)
    out = run(["grad", "--d-model", "32", "--heads", "16", "--seq-len", "4"], capsys)
    assert ELLIPSIS not in out and "(2/2)" in out
    out = run(["params", "--d-model", "8192", "--heads", "1,8,64", "--kv-heads", "1,8"], capsys)
    assert ELLIPSIS not in out


def test_sweep_summary_fits_80_columns(columns_80, tmp_path, capsys):
    rows = tmp_path / "s.jsonl"
    argv = ["sweep", "--heads", "1,2", "--d-model", "8", "--seeds", "1", "--steps", "2"]
    run([*argv, "--workers", "1", "--out", str(rows)], capsys)
    out = run(["sweep", "summary", "--results", str(rows)], capsys)
    assert ELLIPSIS not in out and "multi-lookup" in out


def test_why_heads_commands_fit_80_columns(columns_80, tiny_dir, tmp_path, capsys):
    def files(name):
        return ["--out", str(tmp_path / f"{name}.json"), "--figure", str(tmp_path / f"{name}.png")]

    argv = ["expressivity", "--seq-lens", "5,7", "--head-dims", "1,7", "--targets", "1"]
    out = run([*argv, "--steps", "20", "--model", "none", *files("e")], capsys)
    assert ELLIPSIS not in out
    argv = ["specialisation", "--heads", "1,2", "--steps", "10", "--eval-every", "5"]
    assert ELLIPSIS not in run([*argv, *files("s")], capsys)
    argv = ["redundancy", "--model", str(tiny_dir), "--ranks", "15,3", "--n-texts", "4"]
    assert ELLIPSIS not in run([*argv, "--max-length", "12", *files("r")], capsys)


def test_expressivity_table_keeps_the_model_name_whole_at_80_columns():
    """At the defaults (6 head sizes, MiniLM's name) rich folded 'all-MiniLM-L6-v2' in two."""
    from rich.console import Console

    from headlab.cli.commands.expressivity_command import rank_tables
    from headlab.results.expressivity_result import RankRow

    dims = (1, 2, 4, 8, 16, 32)
    rank = [
        RankRow(source=source, seq_len=n, head_dim=d, kl=7.4e-05, kl_std=0.0, targets=3)
        for source in ("all-MiniLM-L6-v2", "random")
        for n in (8, 16, 32)
        for d in dims
    ]
    console = Console(width=80, record=True)
    tables = rank_tables(rank, dims)
    for table in tables:
        console.print(table)
    text = console.export_text()
    assert len(tables) == 2 and ELLIPSIS not in text
    assert text.count("│ all-MiniLM-L6-v2 │") == 3 * len(tables)
    assert all(f"d={d}" in text for d in dims)


def test_a_title_wider_than_its_table_stays_on_one_line():
    """grad printed '4 head(s): coupling of 4 blocks (off-diagonal max' and then '0)' alone."""
    from rich.console import Console

    from headlab.cli.tables import fitted_tables

    title = "4 head(s): coupling of 4 blocks (off-diagonal max 0)"
    rows = [[str(i), *("0" for _ in range(4))] for i in range(4)]
    console = Console(width=80, record=True)
    console.print(*fitted_tables(title, ["block", "0", "1", "2", "3"], rows, width=80))
    lines = console.export_text().splitlines()
    assert lines[0].rstrip() == title and lines[1].startswith("┏")
