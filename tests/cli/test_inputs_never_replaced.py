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
    code, _, err = run(
        ["model", "roles", "--documents", str(documents), output, str(documents / name)], capsys
    )
    assert code == 2
    assert f"{output} {documents / name} is inside the input folder" in err
    assert sorted(p.name for p in documents.iterdir()) == ["a.txt"]


def test_the_library_refuses_a_declared_input_too(tmp_path):
    from headlab.results.output_policy import Kind, OutputRefused, check_output, reading

    source = tmp_path / "r.json"
    source.write_text('{"headlab": "model-heads"}')  # headlab's, of another kind
    with reading(source), pytest.raises(OutputRefused, match="not even with force"):
        check_output(source, Kind.png("sweep"), force=True)
    assert check_output(source, Kind.png("sweep"), force=True) == source  # outside the block
    source.write_text("{}")  # a user's file: not even outside it
    with pytest.raises(OutputRefused, match="headlab did not write it"):
        check_output(source, Kind.png("sweep"), force=True)


# The model a command opens is its input too: with --model PATH (as with --model-dir), no output
# may replace the model's files nor be written inside its folder, whatever --force says; the
# refusal comes before the model loads. (command, output flag, name inside the model folder)
INSIDE_THE_MODEL = [
    (["circuits"], "--out", "tokenizer_config.json"),
    (["circuits"], "--figure", "model.safetensors"),
    (["circuits"], "--faithfulness-figure", "new.png"),
    (["model", "heads"], "--out", "config.json"),
    (["model", "heads"], "--figure", "new.png"),
    (["model", "collapse"], "--out", "tokenizer.json"),
    (["model", "importance"], "--out", "model.safetensors"),
    (["model", "prune"], "--out", "new.json"),
    (["model", "ablate", "--ablate", "0.0"], "--out", "config.json"),
    (["model", "kv-budget"], "--out", "config.json"),
    (["model", "kv-budget"], "--figure", "new.png"),
    (["expressivity"], "--out", "config.json"),
    (["redundancy"], "--out", "config.json"),
    (["report"], "--out", "report"),
    (["report"], "--png", "figures"),
    (["circuits", "--model-dir"], "--out", "config.json"),
    (["model", "heads", "--model-dir"], "--figure", "model.safetensors"),
]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("command", "output", "name"), INSIDE_THE_MODEL)
@pytest.mark.parametrize("force", [False, True])
def test_the_model_folder_is_never_written_into(
    tiny_dir, tmp_path, capsys, monkeypatch, command, output, name, force
):
    import shutil

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)
    model = shutil.copytree(tiny_dir, tmp_path / "M")
    (model / "tokenizer_config.json").write_text('{"model_max_length": 37}')
    before = _snapshot(model)
    source = [] if command[-1] == "--model-dir" else ["--model"]
    args = [*command, *source, str(model), output, str(model / name)]
    code, _, err = run(args + (["--force"] if force else []), capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"{output} {model / name} is inside the input folder {model}" in err, err
    assert _snapshot(model) == before


def test_a_gguf_model_file_is_never_replaced(tmp_path, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    for output in ("--out", "--figure"):
        code, _, err = run(
            ["model", "heads", "--model", str(gguf), output, str(gguf), "--force"], capsys
        )
        assert code == 2 and "is this command's input" in err, err
        assert gguf.read_bytes() == b"GGUF" + bytes(60)


def test_the_folders_a_named_model_is_read_from_are_inputs(tmp_path, capsys, monkeypatch):
    """SmolLM2 is read from its conversion in headlab's cache, a hub id from the hub's cache:
    no output goes inside either, even with --force."""
    from huggingface_hub import constants

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cases = [
        ("smollm2", tmp_path / "cache" / "SmolLM2-135M-Instruct.Q4_1" / "config.json"),
        ("owner/name", tmp_path / "hub" / "models--owner--name" / "snapshots" / "x.json"),
    ]
    for model, out in cases:
        out.parent.mkdir(parents=True)
        out.write_text("{}")
        code, _, err = run(
            ["model", "heads", "--model", model, "--out", str(out), "--force"], capsys
        )
        assert code == 2 and "is inside the input folder" in err, err
        assert out.read_text() == "{}"
