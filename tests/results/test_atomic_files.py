"""Atomic writes: whole files or the old one, no temp files left, ordinary permissions."""

from __future__ import annotations

import os
import stat

import pytest

from headlab.results.atomic_files import atomic_write_bytes, atomic_write_text


def test_write_replaces_whole_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "sub" / "out.json"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]
    mode = stat.S_IMODE(target.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"
    atomic_write_bytes(target, b"old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_refusal_names_the_library_argument_not_a_cli_flag(tmp_path):
    from headlab.report.figure_files import plot_sweep
    from headlab.results.atomic_files import write_output
    from headlab.results.json_store import write_json
    from headlab.results.output_policy import Kind, OutputRefused, check_output

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    expected = f"path={notes} exists and headlab did not write it; not replacing it"
    for write in (
        lambda: check_output(notes, Kind.json("t")),
        lambda: write_output(notes, b"{}", Kind.json("t"), force=True),
        lambda: write_json(notes, {}, "t", force=True),
    ):
        with pytest.raises(OutputRefused) as refused:
            write()
        assert str(refused.value).startswith(expected)
        assert "not even with force=True" in str(refused.value)
        assert "--" not in str(refused.value)
    with pytest.raises(OutputRefused, match=f"^out={notes} exists"):
        plot_sweep(tmp_path / "r.jsonl", notes)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OutputRefused, match=f"^path={blocker / 'x.json'}: {blocker} is not a dir"):
        check_output(blocker / "x.json", Kind.json("t"))
    assert notes.read_text() == "my notes"


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_a_replaced_file_keeps_its_mode(tmp_path, mode):
    """A results file the user made private stays private when headlab replaces it."""
    from headlab.results.json_store import write_json

    target = tmp_path / "heads.json"
    write_json(target, {"n": 1}, "model-heads")
    target.chmod(mode)
    write_json(target, {"n": 2}, "model-heads")
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert '"n": 2' in target.read_text()
    atomic_write_bytes(target, b"raw")
    assert stat.S_IMODE(target.stat().st_mode) == mode
