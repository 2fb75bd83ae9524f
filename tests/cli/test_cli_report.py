"""``headlab report``: prints the path of index.html; refuses a foreign directory with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from headlab.cli.main import main


def test_cli_prints_the_path_and_refuses_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    main(["report", "--out", str(out), "--text", "hello world", "--results", str(tmp_path)])
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("keep")
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--out", str(foreign)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "headlab did not write" in err
    assert f"--out {foreign}" in err and "not even with --force" in err and "out=" not in err
    assert (foreign / "keep.txt").read_text() == "keep"
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--out", str(out), "--text", "  "])
    assert exit_.value.code == 2


def test_force_never_deletes_a_users_file_inside_a_report_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    args = ["report", "--out", str(out), "--text", "a b", "--results", str(tmp_path / "none")]
    main(args)
    (out / "stale.txt").write_text("added by a user")
    capsys.readouterr()
    for force in ([], ["--force"]):
        with pytest.raises(SystemExit) as exit_:
            main([*args, *force])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"headlab: error: --out {out} ")
        assert "files headlab did not write (stale.txt)" in err and "move them" in err
        assert "not even with --force" in err and "force=True" not in err
        assert (out / "stale.txt").read_text() == "added by a user"
    (out / "stale.txt").unlink()  # the user moves it: then --force (or not) rebuilds
    main([*args, "--force"])
    assert capsys.readouterr().out.strip() == str(out / "index.html")


def test_text_file_and_model_choose_what_the_report_shows(
    tmp_path: Path, tiny_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text_file = tmp_path / "text.txt"
    text_file.write_text("the <b>cat</b> sat\non the mat\n", encoding="utf-8")
    out = tmp_path / "site"
    args = ["report", "--out", str(out), "--results", str(tmp_path / "none")]
    main([*args, "--text-file", str(text_file), "--model", str(tiny_dir)])
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "the &lt;b&gt;cat&lt;/b&gt; sat" in html  # the file's text, escaped
    assert f"The trained model: {tiny_dir.name}" in html  # a folder's model is named by it
    assert 'data-explorer="model"' in html and "3 heads" in html  # the tiny BERT's 3 heads


def test_text_and_text_file_together_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text_file = tmp_path / "text.txt"
    text_file.write_text("a text", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--out", str(tmp_path / "s"), "--text", "x", "--text-file", str(text_file)])
    assert exit_.value.code == 2
    assert "expected one of them, got both" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_model_that_does_not_exist_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--out", str(tmp_path / "s"), "--model", str(tmp_path / "nowhere")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere" in err
    assert err.startswith("headlab: error: --model must be one of minilm, smollm2 or a path, got")


def test_a_results_folder_that_does_not_exist_is_said_and_the_report_still_built(
    tmp_path: Path, tiny_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """A mistyped --results is one warning line; the page is built without those sections (as
    for a fresh folder, where the default headlab-results is missing and nothing is said)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "site"
    missing = tmp_path / "reslts"
    args = ["report", "--out", str(out), "--text", "a b", "--model", str(tiny_dir)]
    main(args)  # the default --results, missing in a fresh folder
    assert capsys.readouterr().err == ""
    main([*args, "--results", str(missing)])
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out / "index.html")
    assert captured.err == (
        f"headlab: warning: --results {missing} does not exist; the report shows no results files\n"
    )


def test_hand_edited_results_are_skipped_with_one_line_each_and_the_page_says_so(
    tmp_path: Path, tiny_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    results = tmp_path / "results"
    results.mkdir()
    heads = {
        "headlab": "model-heads",
        "model": "m",
        "n_texts": 1,
        "num_layers": 1,
        "num_heads": 1,
        "metrics": {},
    }
    (results / "model_heads.json").write_text(json.dumps(heads))
    row = {"num_heads": 10**30, "mean_cosine": 0.5, "nn_agreement": 0.5}
    one_layer = {**row, "num_heads": 1, "layer": 0}
    collapse = {
        "headlab": "model-collapse",
        "model": "m",
        "n_texts": 1,
        "all_layers": [row],
        "per_layer": [one_layer],
    }
    (results / "model_collapse.json").write_text(json.dumps(collapse))
    out = tmp_path / "site"
    args = ["report", "--out", str(out), "--text", "a b", "--model", str(tiny_dir)]
    main([*args, "--results", str(results)])
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out / "index.html")
    assert captured.err.splitlines() == [
        f"headlab: warning: skipped {results / 'model_heads.json'}: model-heads.metrics: "
        "expected a non-empty JSON object, got {}",
        f"headlab: warning: skipped {results / 'model_collapse.json'}: "
        "model-collapse.all_layers[0].num_heads: expected an integer <= 16777216, got "
        "1000000000000000000000000000000",
    ]
    html = (out / "index.html").read_text(encoding="utf-8")
    assert 'data-testid="skipped-heads"' in html and 'data-testid="skipped-collapse"' in html
    assert 'data-testid="missing-prune"' in html


def test_a_large_text_file_is_streamed_and_cut_not_read_whole(tmp_path, capsys, monkeypatch):
    """Issue 31: ``report --text-file`` read the whole file (refusing one over 64 MiB). It reads
    only as far as the report's words need and says "cut from at least N bytes". A file of
    65 MiB + 3 bytes; measuring is replaced by a stand-in that records what it was given."""
    from cli_run import run
    from headlab.analysis import report_measuring

    big = tmp_path / "big.txt"
    word = "w{} "
    with big.open("w", encoding="utf-8") as handle:
        handle.write("".join(word.format(i % 10) for i in range(2**20)))  # 4 MiB of words
        handle.write("x" * (61 * 2**20 + 3))  # no whitespace: one word to the end
    size = big.stat().st_size
    seen = {}

    def stand_in(options):
        seen["options"] = options
        raise ValueError("stand-in: measured nothing")

    monkeypatch.setattr(report_measuring, "measure_report", stand_in)
    args = ["report", "--out", str(tmp_path / "site"), "--results", str(tmp_path)]
    code, _, err = run([*args, "--text-file", str(big)], capsys)
    assert code == 2 and "stand-in" in err, err
    options = seen["options"]
    assert len(options.text.split()) > report_measuring.REPORT_MAX_WORDS
    assert len(options.text) < 2**20  # a prefix, not the 65 MiB
    assert options.text_cut_note == f"cut from at least {size} bytes"
