"""What ``force`` may replace: headlab's own output of another kind, never a file headlab did not
write (``headlab.results.output_policy``)."""

from __future__ import annotations

import json

import pytest

from headlab.results.output_policy import (
    Kind,
    OutputRefused,
    check_output,
    headlab_output_kind,
)

SWEEP_ROW = {
    "run_id": "r1",
    "config": {},
    "step": 0,
    "loss": 1.5,
    "accuracy": 0.25,
    "final": False,
    "head_entropy": None,
    "params": 7,
    "seconds": None,
}


def _png(tag: str | None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(1, 1))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={} if tag is None else {"headlab": tag})
    plt.close(figure)
    return buffer.getvalue()


def _sweep_row() -> bytes:
    from headlab.results.run_config import RunConfig

    config = RunConfig(
        task="copy", num_heads=3, num_kv_heads=3, head_dim=5, d_model=15, layers=2, seed=7, steps=11
    )
    row = {**SWEEP_ROW, "config": config.to_dict()}
    return (json.dumps(row) + "\n").encode()


# headlab's output of another kind than the JSON "model-heads" results being written
HEADLAB_OUTPUTS = {
    "other results (JSON)": lambda: json.dumps({"headlab": "model-prune", "x": 1}).encode(),
    "a figure (PNG)": lambda: _png("sweep-plot"),
    "sweep results (JSONL)": _sweep_row,
    "corpus-roles rows (JSONL)": lambda: b'{"headlab": "corpus-roles", "n": 3}\n{"n": 4}\n',
}
# files headlab did not write, though some look close
USER_FILES = {
    "text": lambda: b"my notes\n",
    "JSON without a headlab key": lambda: json.dumps({"name": "mine"}).encode(),
    "JSON whose headlab key is not a string": lambda: json.dumps({"headlab": 3}).encode(),
    "a JSON list": lambda: b'["headlab"]',
    "a PNG without headlab's chunk": lambda: _png(None),
    "JSONL that only starts like a row": lambda: b'{"run_id": "mine", "note": 1}\n',
    "a row cut before its newline": lambda: _sweep_row().rstrip(b"\n"),
    "binary": lambda: bytes(range(256)) * 5,
}


@pytest.mark.parametrize("content", HEADLAB_OUTPUTS.values(), ids=HEADLAB_OUTPUTS.keys())
def test_force_replaces_headlab_output_of_another_kind(tmp_path, content):
    from headlab.results.atomic_files import write_output

    path = tmp_path / "out.bin"
    path.write_bytes(content())
    assert headlab_output_kind(path) is not None
    with pytest.raises(OutputRefused, match=r"holds headlab .*pass force=True to replace it"):
        check_output(path, Kind.json("model-heads"))
    write_output(path, b'{"headlab": "model-heads"}', Kind.json("model-heads"), force=True)
    assert path.read_bytes() == b'{"headlab": "model-heads"}'


@pytest.mark.parametrize("content", USER_FILES.values(), ids=USER_FILES.keys())
def test_force_never_replaces_a_file_headlab_did_not_write(tmp_path, content):
    from headlab.results.atomic_files import write_output

    path = tmp_path / "mine.txt"
    data = content()
    path.write_bytes(data)
    assert headlab_output_kind(path) is None
    for kind in (Kind.json("model-heads"), Kind.png("sweep-plot")):
        for force in (False, True):
            with pytest.raises(OutputRefused) as refused:
                write_output(path, b"new", kind, force=force)
            message = str(refused.value)
            assert message.startswith(f"path={path} exists and headlab did not write it")
            assert "not even with force=True" in message and "\n" not in message
    assert path.read_bytes() == data


def test_a_tag_is_named_on_one_bounded_line(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"headlab": "a\nb" + "x" * 10_000}))
    with pytest.raises(OutputRefused) as refused:
        check_output(path, Kind.json("model-heads"))
    message = str(refused.value)
    assert "\n" not in message and len(message) < 400 and "holds headlab 'a\\nbx" in message


def test_the_same_kind_and_empty_files_need_no_force(tmp_path):
    from headlab.results.json_store import write_json

    path = tmp_path / "heads.json"
    write_json(path, {"n": 1}, "model-heads")
    write_json(path, {"n": 2}, "model-heads")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    write_json(empty, {"n": 3}, "model-heads")
    assert json.loads(path.read_text())["n"] == 2 and json.loads(empty.read_text())["n"] == 3
