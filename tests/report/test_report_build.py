"""Building the page: sections, escaping, atomic placement, refusing to overwrite, PNGs, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_pages import build, collect_measured

from headlab.report import ReportRequest, safe_json
from headlab.report.build import FIGURES_MARKER, MARKER

XSS = "<img src=x onerror=alert(1)> </script><script>alert(2)</script> & \"done\" 'x' end"


def _page_data(html: str) -> dict:
    pattern = r'<script type="application/json" id="report-data">(.*?)</script>'
    match = re.search(pattern, html, re.S)
    assert match, "the page must embed its data in one JSON script element"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_results: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("built")
    index = build(root / "report", ReportRequest(text=XSS, results=shared_results))
    return index, index.read_text(encoding="utf-8")


def test_safe_json_keeps_script_breakers_inside_the_string() -> None:
    text = safe_json({"t": "</script><b>&amp;\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"t": "</script><b>&amp;\u2028"}


def test_user_text_is_escaped_everywhere(built: tuple[Path, str]) -> None:
    _, html = built
    assert "<img src=x" not in html and "<script>alert" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the text, shown as text
    assert "&amp; &#34;done&#34; &#39;x&#39; end" in html  # quotes cannot end an attribute
    # the data element and our own script, the displays' code once and each display's data and
    # one-line draw call (report/displays), nothing else
    displays = html.count('<div class="hl-display"')
    assert displays >= 1 and html.count("<script") == 2 + 1 + 2 * displays
    assert _page_data(html)["explorers"]["text"]["tokens"] == XSS.split()


def test_page_is_self_contained(built: tuple[Path, str]) -> None:
    _, html = built
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(http" not in html
    assert re.findall(r'<img[^>]+src="([^"]{0,22})', html) == ["data:image/png;base64,"] * 3


def test_results_sections_show_figures_and_tables(
    built: tuple[Path, str], shared_results: Path
) -> None:
    _, html = built
    for key in ("heads", "collapse", "prune", "sweep"):
        assert f'data-testid="figure-{key}"' in html
        assert f'data-testid="missing-{key}"' not in html
    # sweep, through experiments.summary.summarize: retrieval with 4 heads, two seeds,
    # accuracies 0.65 and 0.66 (0.2 + 0.4 + 0.05 + 0.01 * seed): mean 0.655, std 0.007
    assert (
        "<td>retrieval</td><td>4</td><td>4</td><td>plain</td><td>2</td><td>0.655 ± 0.007</td>"
        in html
    )


def test_the_heads_part_is_the_heads_display_of_the_file_alone(
    built: tuple[Path, str], shared_results: Path
) -> None:
    """The notebook's display of model_heads.json, its every value, and no second view of the
    same numbers beside it (no grid of links, no figure, no table of the strongest heads)."""
    _, html = built
    data = json.loads((shared_results / "model_heads.json").read_text())
    part = html[html.index('<section id="model">') : html.index("Collapsing heads into one")]
    shown = re.findall(r'data-hl-kind="heads".*?class="hl-data">(.*?)</script>', part, re.S)
    assert len(shown) == 1
    display = json.loads(shown[0])
    assert display["metrics"] == data["metrics"]
    assert (display["num_layers"], display["num_heads"]) == (data["num_layers"], data["num_heads"])
    assert "<img" not in part and "<table" not in part and 'class="cell"' not in part


def test_answer_engine_section(built: tuple[Path, str]) -> None:
    _, html = built
    from headlab.analysis import run_seed_scenarios

    expected = run_seed_scenarios(seed=0)
    for i, scenario in enumerate(expected):
        verdict = scenario.comparison.to_dict()["verdict"]
        assert re.search(rf'data-testid="verdict-{i}">{verdict}<', html)
    assert 'data-testid="coupling-1"' in html


def test_a_section_without_results_is_one_line_naming_its_commands(tmp_path: Path) -> None:
    """A fresh results folder (as after `make demo`: compare, then report): each results
    section is one line naming the commands that fill it, without sub-headings or boxes."""
    index = build(tmp_path / "r", ReportRequest(text="a b", results=tmp_path / "none"))
    html = index.read_text()
    for section, commands in (
        ("model", ["headlab model heads", "headlab model collapse", "headlab model prune"]),
        ("sweeps", ["headlab sweep"]),
        ("why", ["headlab expressivity", "headlab specialisation", "headlab redundancy"]),
    ):
        body = re.search(rf'<section id="{section}">(.*?)</section>', html, re.S).group(1)
        lines = re.findall(r'<p class="missing"[^>]*>(.*?)</p>', body, re.S)
        assert len(lines) == 1 and "\n" not in lines[0], section
        assert "<h3>" not in body and "<figure" not in body
        for command in commands:
            assert f"<code>{command}" in lines[0]
    assert 'data-testid="missing-' not in html


def test_a_missing_part_of_a_partly_filled_section_is_one_line(
    tmp_path: Path, results_dir: Path
) -> None:
    (results_dir / "model_prune.json").unlink()
    index = build(tmp_path / "r", ReportRequest(text="a b", results=results_dir))
    html = index.read_text()
    line = re.search(r'data-testid="missing-prune">(.*?)</p>', html).group(1)
    assert "<code>headlab model prune</code>" in line
    assert 'data-testid="figure-collapse"' in html and 'data-testid="empty-model"' not in html


def test_rebuild_replaces_a_report_but_never_a_foreign_directory(tmp_path: Path) -> None:
    options = ReportRequest(text="x y z", results=tmp_path / "none")
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    for force in (False, True):  # --force never replaces a folder headlab did not write
        with pytest.raises(ValueError, match=r"headlab did not write"):
            build(out, options, force=force)
    assert (out / "thesis.tex").read_text() == "mine"

    report = tmp_path / "report"
    build(report, options)
    (report / "stale.txt").write_text("added by a user")
    with pytest.raises(ValueError, match=r"files headlab did not write \(stale.txt\)"):
        build(report, options)
    assert (report / "stale.txt").read_text() == "added by a user"
    # force never deletes a user's file inside a headlab folder: refused, naming it
    with pytest.raises(ValueError, match=r"files headlab did not write \(stale.txt\)") as refused:
        build(report, options, force=True)
    message = str(refused.value)
    assert "move them" in message and "--force" not in message  # the CLI maps the names
    assert (report / "stale.txt").read_text() == "added by a user"
    (report / "stale.txt").rename(tmp_path / "stale.txt")  # the user moves it; then it builds
    build(report, ReportRequest(text="p q", results=tmp_path / "none"))
    (tmp_path / "stale.txt").unlink()
    assert sorted(p.name for p in report.iterdir()) == [MARKER, "index.html", "measurements.json"]
    assert _page_data((report / "index.html").read_text())["explorers"]["text"]["tokens"] == [
        "p",
        "q",
    ]
    # nothing left behind next to the target (temp and old directories are gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "report"]


def test_force_replaces_headlab_output_of_another_kind_never_a_user_file_inside(
    tmp_path: Path,
) -> None:
    """A headlab figures folder, or a headlab results file, where a report goes: refused, and
    replaced with force; a figures folder holding a user's file: refused even with force."""
    from headlab.results.output_policy import OutputRefused

    options = ReportRequest(text="x y", results=tmp_path / "none")
    figures = tmp_path / "figures"
    build(tmp_path / "r", options, png=figures)
    assert (figures / FIGURES_MARKER).is_file()
    with pytest.raises(OutputRefused, match=r"is a headlab figures folder, not a report"):
        build(figures, options)
    (figures / "caption.txt").write_text("mine")
    with pytest.raises(OutputRefused, match=r"headlab did not write \(caption.txt\)"):
        build(figures, options, force=True)
    assert (figures / "caption.txt").read_text() == "mine"
    (figures / "caption.txt").unlink()
    build(figures, options, force=True)
    assert (figures / MARKER).is_file() and not (figures / FIGURES_MARKER).exists()

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"headlab": "model-heads", "heads": []}))
    with pytest.raises(OutputRefused, match=r"holds headlab model-heads results \(JSON\)"):
        build(results, options)
    build(results, options, force=True)
    assert (results / MARKER).is_file()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(OutputRefused, match=r"headlab did not write it.*not even with force"):
        build(notes, options, force=True)
    assert notes.read_text() == "my notes"


def test_png_figures(tmp_path: Path, results_dir: Path) -> None:
    figures = tmp_path / "figs"
    build(tmp_path / "r", ReportRequest(text="a b c d", results=results_dir), png=figures)
    names = {p.name for p in figures.iterdir() if not p.name.startswith(".")}
    expected = {"attention.png", "heads.png", "collapse.png", "prune.png", "sweep.png"}
    assert expected | {"coupling.png"} == names
    for name in names:
        assert (figures / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.model
def test_trained_encoder_is_shown_with_all_heads_and_as_one_head(built: tuple[Path, str]) -> None:
    _, html = built
    model = _page_data(html)["explorers"]["model"]
    names = [view["name"] for view in model["views"]]
    assert names == ["12 heads", "1 head, same weights"]
    assert [len(view["layers"]) for view in model["views"]] == [6, 6]
    assert [len(view["layers"][0]) for view in model["views"]] == [12, 1]
    assert model["tokens"][0] == "[CLS]" and model["tokens"][-1] == "[SEP]"


def test_a_refusal_names_the_library_arguments_not_cli_flags(tmp_path: Path) -> None:
    from headlab.results.output_policy import OutputRefused

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(OutputRefused) as refused:
        build(foreign, ReportRequest(text="a b", results=tmp_path / "none"))
    message = str(refused.value)
    assert message.startswith(f"out={foreign} is a folder that headlab did not write")
    assert "force=True" in message and "--" not in message
    with pytest.raises(OutputRefused, match=r"^png=.* and out=.* must be separate folders$"):
        build(tmp_path / "r", ReportRequest(results=tmp_path / "none"), png=tmp_path / "r")
    assert (foreign / "notes.txt").read_text() == "keep"


def test_a_long_text_and_a_model_of_many_heads_are_bounded_said_on_the_page_and_warned(
    tmp_path: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeded layer's work grows with the square of the words and every head's weights
    travel in the page: past REPORT_MAX_WORDS the text is cut, past PAGE_BYTES the model view
    is binned coarser; each says so on the page and in one warning line."""
    from headlab.analysis import report_measuring
    from headlab.analysis.report_measuring import TextCutWarning
    from headlab.results import explorers as heatmap

    monkeypatch.setattr(report_measuring, "REPORT_MAX_WORDS", 12)
    monkeypatch.setattr(heatmap, "PAGE_BYTES", heatmap.encoded_bytes(2 * 3 + 2, 12))
    text = "\n".join(f"w{i}  x{i}" for i in range(40))  # 80 words, kept as written
    with pytest.warns(TextCutWarning) as caught:
        options = ReportRequest(text=text, results=tmp_path, model=str(tiny_dir))
        collected = collect_measured(options)
    assert [str(w.message) for w in caught] == [
        "the text has 80 words; the report takes the first 12 (the seeded layer's work grows "
        "with the square of the words)",
        f"{tiny_dir.name}'s 6 heads and their 2 one-head views are binned to 12 x 12 cells on "
        f"the page, so that the explorer's weights take at most "
        f"{heatmap.PAGE_BYTES / 2**20:g} MiB",
    ]
    seeded = collected.explorers["text"]
    assert len(seeded["tokens"]) == 12 and seeded["total_tokens"] == 80
    assert seeded["cut_reason"] == "the report takes at most 12 words"
    assert collected.sections["text"] == "\n".join(f"w{i}  x{i}" for i in range(6)) + " …"
    model = collected.explorers["model"]
    assert model["bins"] == 12 and len(model["tokens"]) > 12
    assert "Binned to 12 x 12 cells" in model["note"]


def test_the_models_explorer_is_one_cell_a_token_when_it_fits(
    tmp_path: Path, tiny_dir: Path
) -> None:
    """Within PAGE_BYTES the model's explorer keeps every token: its decoded cells are the
    model's own weights (``model_text_attention``) to the 8-bit step, every head and view; the
    encoder's rows are whole (no triangle)."""
    import numpy as np

    from headlab.heads.model_text_attention import model_text_attention
    from headlab.models import load
    from headlab.results.explorers import TOKEN_CELLS, decoded_views

    text = " ".join(f"w{i % 7} x{i}" for i in range(40))
    collected = collect_measured(ReportRequest(text=text, results=tmp_path, model=str(tiny_dir)))
    explorer = collected.explorers["model"]
    expected = model_text_attention(load(str(tiny_dir)), text)
    assert explorer["cells"] == TOKEN_CELLS and explorer["triangle"] is False
    assert explorer["tokens"] == expected.tokens and explorer["bins"] == len(expected.tokens)
    assert "One cell a token" in explorer["note"]
    for got, want in zip(decoded_views(explorer), expected.views, strict=True):
        step = want.weights.max(axis=(2, 3), keepdims=True) / 510
        assert np.all(np.abs(got.weights - want.weights) <= step + 1e-9)
