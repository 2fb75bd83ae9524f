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
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--out", str(out), "--text", "  "])
    assert exit_.value.code == 2
