"""Bad input ends in one line and exit 2, before any long work; what cannot fit is refused early."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cli_run import run
from model_files import edited_copy

HUGE = "99999999999999999999999"


def one_line(argv, capsys, message, code=2):
    got, out, err = run(argv, capsys)
    assert got == code, err
    assert err.count("\n") == 1 and err.startswith("headlab: error:"), err
    assert "Traceback" not in err and message in err, err
    return out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["params", "--heads", ""], "at least one head count"),
        (["params", "--d-model", HUGE], "--d-model must be between 1 and"),
        (["compare", "--d-model", HUGE], "--d-model must be between 1 and"),
        (["compare", "--seq-len", HUGE], "--seq-len must be between 1 and"),
        (["compare", "--batch", HUGE], "--batch must be between 1 and"),
        (["compare", "--seed", HUGE], "--seed must be between 0 and"),
        (["grad", "--seq-len", HUGE], "--seq-len must be between 1 and"),
        (["sweep", "--seeds", HUGE], "--seeds must be between 1 and 10000"),
        (["sweep", "--heads", "1,2", "--d-model", "8", "--seeds", "9000"], "at most 10000 runs"),
        (["compare", "--seq-len", "40000"], "more than half of this machine's"),
        (["grad", "--seq-len", "40000"], "more than half of this machine's"),
    ],
)
def test_sizes_out_of_range_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line(argv, capsys, message)
    assert list(tmp_path.iterdir()) == []


def test_a_ray_address_that_does_not_answer_is_one_line_in_seconds(tmp_path, capsys):
    argv = ["sweep", "--executor", "ray", "--address", "127.0.0.1:1", "--heads", "1"]
    one_line([*argv, "--out", str(tmp_path / "s.jsonl")], capsys, "does not answer")
    assert list(tmp_path.iterdir()) == []


def test_undecodable_argument_names_its_option(capsys, tmp_path):
    text = b"caf\xe9".decode("utf-8", "surrogateescape")
    one_line(["report", "--text", text, "--out", str(tmp_path / "r")], capsys, "--text: expected")


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("one text here\nanother text there\n")
    return path


def model_argv(model_dir, corpus, tmp_path, command="heads"):
    out = str(tmp_path / "out.json")
    return ["model", command, "--model-dir", str(model_dir), "--corpus", str(corpus), "--out", out]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-length", "38"], "--max-length must be between 2 and 37, got 38"),
        (["--max-length", "0"], "--max-length must be between 2"),
        (["--n-texts", HUGE], "--n-texts must be between"),
    ],
)
def test_max_length_is_capped_at_the_model_positions(
    tiny_dir, corpus, tmp_path, capsys, extra, message
):
    one_line([*model_argv(tiny_dir, corpus, tmp_path), *extra], capsys, message)
    assert not (tmp_path / "out.json").exists()


def test_the_default_max_length_fits_a_model_with_few_positions(tiny_dir, corpus, tmp_path, capsys):
    code, _, err = run(model_argv(tiny_dir, corpus, tmp_path), capsys)  # 37 positions, default 128
    assert code == 0, err


def test_nan_temperature_is_refused_before_the_model_loads(tiny_dir, corpus, tmp_path, capsys):
    argv = [*model_argv(tiny_dir, corpus, tmp_path, "importance"), "--temperature", "nan"]
    one_line(argv, capsys, "--temperature must be a finite number > 0, got nan")


def test_undecodable_corpus_names_the_file_and_line(tiny_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"good line\nbad \xff\xfe line\n")
    one_line(model_argv(tiny_dir, corpus, tmp_path), capsys, "corpus.txt:2: expected UTF-8 text")


def edited_model(tiny_dir: Path, tmp_path: Path, **config_changes) -> Path:
    return edited_copy(tiny_dir, tmp_path / "model", **config_changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # checked before the build (models/hf/config_fields.py): else a torch assertion while
        # the embedding is built, and NaN statistics
        ({"pad_token_id": 40000}, "config.json: pad_token_id must be a token id below"),
        ({"layer_norm_eps": math.nan}, "config.json: layer_norm_eps must be a finite number >= 0"),
        # refused from what model.safetensors holds, not after building ten million layers
        ({"num_hidden_layers": 10_000_000}, "config declares num_hidden_layers=10000000, but"),
        ({"hidden_size": int(HUGE)}, "transformers cannot build a 'bert' model from its config"),
    ],
)
def test_bad_config_numbers_name_the_file(tiny_dir, corpus, tmp_path, capsys, changes, message):
    model = edited_model(tiny_dir, tmp_path, **changes)
    one_line(model_argv(model, corpus, tmp_path), capsys, message)


def test_pooling_configs_that_are_lists_name_the_file(tiny_dir, corpus, tmp_path, capsys):
    model = edited_model(tiny_dir, tmp_path)
    (model / "1_Pooling").mkdir(exist_ok=True)
    (model / "1_Pooling" / "config.json").write_text("[1, 2]")
    one_line(model_argv(model, corpus, tmp_path), capsys, "config.json: expected a JSON object")


def test_nan_weights_name_the_tensor(tiny_dir, corpus, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    model = edited_model(tiny_dir, tmp_path)
    tensors = load_file(model / "model.safetensors")
    name = next(k for k in tensors if "query.weight" in k)
    tensors[name][0, 0] = math.nan
    save_file(tensors, model / "model.safetensors")
    one_line(model_argv(model, corpus, tmp_path), capsys, f"tensor {name!r} holds 1 NaN")


def test_fast_and_explicit_paths_agree_on_nan_inputs():
    """A NaN in one key's input reaches every query of that sequence on both paths, as in torch."""
    from headlab import MultiHeadAttention

    torch.manual_seed(0)
    module = MultiHeadAttention(12, 3, batch_first=True).eval()
    reference = torch.nn.MultiheadAttention(12, 3, batch_first=True).eval()
    reference.load_state_dict(module.state_dict(), strict=False)
    x = torch.randn(2, 5, 12)
    x[0, 2, 3] = math.nan
    with torch.no_grad():
        fast, _ = module(x, x, x, need_weights=False)
        explicit, _ = module(x, x, x, need_weights=True)
        torch_out, _ = reference(x, x, x, need_weights=False)
    for out in (fast, explicit, torch_out):
        assert torch.isnan(out[0]).all() and not torch.isnan(out[1]).any()
    torch.testing.assert_close(fast[1], explicit[1])


def test_an_empty_prompt_is_refused_before_the_model_loads(capsys, monkeypatch):
    import headlab.models

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the prompt was checked")

    monkeypatch.setattr(headlab.models, "load", never)
    one_line(["model", "generate", ""], capsys, "PROMPT must be a text to continue, got an empty")


@pytest.mark.parametrize("scale", ["1e30", "1e300"])
@pytest.mark.parametrize("as_json", [True, False])
def test_grad_that_overflows_is_refused_not_printed_as_infinity(capsys, scale, as_json):
    argv = ["grad", "--talking-heads", scale, "--d-model", "16", "--heads", "4"]
    message = (
        f"overflowed float32 (infinite or NaN values): nothing to measure; lower "
        f"--talking-heads {float(scale):g}"
    )
    assert one_line([*argv, *(["--json"] if as_json else [])], capsys, message) == ""


def test_every_json_printer_refuses_what_json_cannot_hold():
    """One printer for every --json (strict JSON): NaN and infinity are refused, named by place."""
    import ast

    from headlab.cli import outputs

    with pytest.raises(ValueError, match=r"not a finite number at sides\[1\]\.coupling\[0\]\[2\]"):
        outputs.print_json({"sides": [{"coupling": [[1.0]]}, {"coupling": [[0.0, 1.0, math.inf]]}]})
    with pytest.raises(ValueError, match="not a finite number at the top"):
        outputs.print_json(math.nan)
    cli = Path(outputs.__file__).parent
    for module in cli.rglob("*.py"):
        calls = [
            node
            for node in ast.walk(ast.parse(module.read_text()))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "dumps"
        ]
        assert not calls or module.name == "outputs.py", f"{module.name} prints JSON itself"


TEXT_FILE_READERS = [
    ["report", "--out", "rep", "--text-file"],
    ["model", "heads", "--model", "nowhere", "--text-file"],
    ["model", "kv-budget", "--model", "nowhere", "--text-file"],
    ["model", "kv-budget", "--model", "nowhere", "--calibration-file"],
]


@pytest.mark.parametrize("argv", TEXT_FILE_READERS, ids=lambda a: " ".join(a[:2] + a[-1:]))
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("directory", "is a directory, expected a regular file"),
        ("fifo", "is a FIFO, expected a regular file"),
        ("empty", "expected text, got an empty file"),
        ("blank", "expected text, got an empty file"),
        ("missing", "does not exist"),
    ],
)
def test_a_text_file_that_is_not_a_text_names_the_real_cause(
    argv, kind, message, tmp_path, capsys, monkeypatch
):
    """Every --text-file goes through one reader: a folder or a FIFO is not said to be missing,
    an empty file is not blamed on --text."""
    import os

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "given"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind != "missing":
        path.write_text("" if kind == "empty" else " \n\t\n")
    err_line = one_line([*argv, str(path)], capsys, message)
    assert err_line == ""
    err = run([*argv, str(path)], capsys)[2]
    assert f"{argv[-1]} {path}" in err and "--text " not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--heads", "1", "--d-model", "8", "--seeds", "1", "--steps", "1"],
        ["model", "roles", "--documents", "DOCS", "--model", "nowhere"],
    ],
    ids=["sweep", "model roles"],
)
def test_an_address_without_executor_ray_is_refused_not_ignored(argv, tmp_path, capsys):
    """--address names a Ray cluster: with the local executor it would be silently ignored and
    the work run here instead; refused before any work."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("one two three")
    argv = [str(tmp_path / "docs") if a == "DOCS" else a for a in argv]
    out = ["--out", str(tmp_path / "s.jsonl")]
    message = "--address 10.0.0.1:6379 is for --executor ray, got --executor local"
    one_line([*argv, *out, "--address", "10.0.0.1:6379"], capsys, message)
    assert not (tmp_path / "s.jsonl").exists()
