"""A command never writes over its own input, not even with --force, and never writes inside an
input folder whose files it reads (issue 31). Every input option of every command, against every
output option, for any content: refused in one line (exit 2), the input's bytes unchanged. The
refusals come before any model loads, so these run in-process and fast."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import run

# (argv with {input} where the input goes, the output option that names the same file)
SAME_FILE = [
    (["model", "heads", "--text-file", "{input}"], "--out"),
    (["model", "heads", "--text-file", "{input}"], "--figure"),
    (["model", "heads", "--corpus", "{input}"], "--out"),
    (["model", "collapse", "--corpus", "{input}"], "--out"),
    (["model", "prune", "--corpus", "{input}"], "--out"),
    (["model", "importance", "--corpus", "{input}"], "--out"),
    (["model", "kv-budget", "--text-file", "{input}"], "--out"),
    (["model", "kv-budget", "--calibration-file", "{input}"], "--figure"),
    (["sweep", "plot", "--results", "{input}"], "--out"),
]
CONTENTS = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    st.just(b'{"headlab": "model-heads"}'),  # looks like a results file headlab may replace
    st.just(b'{"run_id": "a"}\n'),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(SAME_FILE), CONTENTS, st.booleans())
def test_an_input_is_never_replaced_even_with_force(tmp_path, capsys, case, content, force):
    argv, output = case
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    args = [a.replace("{input}", str(path)) for a in argv] + [output, str(path)]
    code, _, err = run(args + (["--force"] if force else []), capsys)
    assert code == 2, err
    assert path.read_bytes() == content
    assert len(err.strip().splitlines()) == 1 and "is this command's input" in err


@pytest.mark.parametrize("force", [False, True])
def test_the_same_file_by_another_path_is_the_input_too(tmp_path, capsys, monkeypatch, force):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    Path("t.txt").write_text("hello world, a text")
    args = ["model", "heads", "--text-file", "t.txt", "--out", "sub/../t.txt"]
    code, _, err = run(args + (["--force"] if force else []), capsys)
    assert code == 2 and "is this command's input" in err
    assert Path("t.txt").read_text() == "hello world, a text"


@pytest.mark.parametrize("output", ["--out", "--summary"])
def test_outputs_inside_the_documents_folder_are_refused(tmp_path, capsys, output):
    documents = tmp_path / "D"
    documents.mkdir()
    (documents / "a.txt").write_text("one document")
    name = "x.jsonl" if output == "--out" else "s.json"
    code, _, err = run(["model", "roles", "--documents", str(documents), output,
                        str(documents / name)], capsys)  # fmt: skip
    assert code == 2
    assert f"{output} {documents / name} is inside the input folder" in err
    assert sorted(p.name for p in documents.iterdir()) == ["a.txt"]


def test_the_library_refuses_a_declared_input_too(tmp_path):
    from headlab.results.output_policy import Kind, OutputRefused, check_output, reading

    source = tmp_path / "r.jsonl"
    source.write_text("{}")
    with reading(source), pytest.raises(OutputRefused, match="not even with force"):
        check_output(source, Kind.png("sweep"), force=True)
    assert check_output(source, Kind.png("sweep"), force=True) == source  # outside the block
