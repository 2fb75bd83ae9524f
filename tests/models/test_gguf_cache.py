"""The GGUF -> safetensors cache (models/gguf_cache.py), on the tiny GGUF of gguf_files.py, in a
temporary cache folder (never the user's): the converted folder computes what transformers
computes from the GGUF itself, a damaged cache is rebuilt, two processes converting at once both
succeed with one folder, and $HEADLAB_CACHE is honoured."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from gguf_files import TOKENS, WIDTH, write_llama_gguf

from headlab.models import gguf_cache
from headlab.models.gguf_cache import CACHE_ENV, MANIFEST, converted, stale_reason
from headlab.notices import CacheNotice


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return write_llama_gguf(tmp_path / "tiny-llama.gguf")


def convert(gguf: Path, root: Path) -> Path:
    with pytest.warns(CacheNotice, match=str(root)):
        return converted(gguf, root)


def test_converted_folder_gives_the_ggufs_logits(tiny_gguf: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = convert(tiny_gguf, tmp_path / "cache")
    assert stale_reason(folder, tiny_gguf) is None
    direct = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent),
        gguf_file=tiny_gguf.name,
        dtype=torch.float32,
        attn_implementation="eager",
    ).eval()
    cached = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, attn_implementation="eager"
    ).eval()
    text = "abcdef fed cab"
    ids = AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)(text)
    assert AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"] == ids["input_ids"]
    batch = torch.tensor([ids["input_ids"]])
    with torch.no_grad():
        assert torch.equal(cached(batch).logits, direct(batch).logits)


def test_second_call_reads_the_cache_without_converting(tiny_gguf: Path, tmp_path: Path) -> None:
    folder = convert(tiny_gguf, tmp_path)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert converted(tiny_gguf, tmp_path) == folder
    assert not [w for w in caught if issubclass(w.category, CacheNotice)]
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def _cut_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])


def _flip_a_byte(folder: Path) -> None:
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-7] ^= 0x55
    weights.write_bytes(bytes(data))


def _drop_manifest(folder: Path) -> None:
    (folder / MANIFEST).unlink()


def _garble_config(folder: Path) -> None:
    config = folder / "config.json"
    config.write_text("x" * len(config.read_text()))


def _drop_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_cut_weights, "cut short"),
        (_flip_a_byte, "damaged"),
        (_drop_manifest, "manifest"),
        (_garble_config, "damaged"),
        (_drop_tokenizer, "missing"),
    ],
)
def test_a_damaged_cache_is_detected_and_rebuilt(damage, reason, tiny_gguf, tmp_path) -> None:
    folder = convert(tiny_gguf, tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    damage(folder)
    assert reason in stale_reason(folder, tiny_gguf)
    with pytest.warns(CacheNotice, match=reason):
        assert converted(tiny_gguf, tmp_path) == folder
    assert stale_reason(folder, tiny_gguf) is None
    rebuilt = json.loads((folder / MANIFEST).read_text())["files"]
    # the same files and sizes (safetensors orders its header's metadata as it likes)
    assert {k: v["size"] for k, v in rebuilt.items()} == {
        k: v["size"] for k, v in manifest["files"].items()
    }
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_changed_gguf_makes_the_cache_stale(tiny_gguf: Path, tmp_path: Path) -> None:
    import numpy as np

    folder = convert(tiny_gguf, tmp_path)
    before = (folder / "model.safetensors").read_bytes()
    embedding = np.full((len(TOKENS), WIDTH), 0.25, dtype=np.float32)
    write_llama_gguf(tiny_gguf, tensors={"token_embd.weight": embedding})
    assert stale_reason(folder, tiny_gguf) is not None
    convert(tiny_gguf, tmp_path)
    assert (folder / "model.safetensors").read_bytes() != before


def test_a_leftover_of_a_dead_conversion_is_removed(tiny_gguf: Path, tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    leftover = tmp_path / f".tmp-tiny-llama-{dead.stdout.strip()}-abc123"
    leftover.mkdir()
    (leftover / gguf_cache.MARK).write_bytes(b"")  # headlab's: it marks a folder first
    (leftover / "model.safetensors").write_bytes(b"partial")
    convert(tiny_gguf, tmp_path)
    assert not leftover.exists()


CONVERT = """
import sys, warnings
from pathlib import Path
from headlab.models.gguf_cache import converted
warnings.simplefilter("ignore")
print(converted(Path(sys.argv[1]), Path(sys.argv[2])))
"""


def test_two_processes_converting_at_once_both_succeed_with_one_result(tiny_gguf, tmp_path):
    root = tmp_path / "cache"
    src = str(Path(gguf_cache.__file__).parents[2])
    env = {"PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", CONVERT, str(tiny_gguf), str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outputs]
    folders = {out.strip() for out, _ in outputs}
    assert folders == {str(root / "tiny-llama")}
    assert stale_reason(root / "tiny-llama", tiny_gguf) is None
    assert sorted(p.name for p in root.iterdir()) == [".tiny-llama.lock", "tiny-llama"]


def test_a_conversion_in_a_fresh_process_writes_nothing_to_stderr(tiny_gguf, tmp_path):
    """transformers' GGUF reader draws a tqdm bar ("Converting and de-quantizing GGUF
    tensors") that only its module's own tqdm reaches; in a fresh process (the CLI's first
    load of SmolLM2) that module is not imported yet when the conversion starts."""
    src = str(Path(gguf_cache.__file__).parents[2])
    env = {"PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-c", CONVERT, str(tiny_gguf), str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_without_a_lock_the_first_rename_wins(tiny_gguf: Path, tmp_path: Path) -> None:
    """Where there is no fcntl, both processes convert; the second keeps the first's folder."""
    first = convert(tiny_gguf, tmp_path)
    stamp = (first / MANIFEST).stat().st_mtime_ns
    second = tmp_path / ".tmp-tiny-llama-0-late"
    second.mkdir()
    gguf_cache._write_conversion(tiny_gguf, second)
    gguf_cache._replace(second, first, tiny_gguf)
    assert (first / MANIFEST).stat().st_mtime_ns == stamp
    assert stale_reason(first, tiny_gguf) is None


def test_the_environment_variable_chooses_the_folder(tiny_gguf, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert gguf_cache.cache_root() == tmp_path / "mine"
    with pytest.warns(CacheNotice, match="mine"):
        folder = converted(tiny_gguf)
    assert folder == tmp_path / "mine" / "tiny-llama"
    assert stale_reason(folder, tiny_gguf) is None


def test_without_the_variable_the_platform_cache_is_used(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert gguf_cache.cache_root() == tmp_path / "headlab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert gguf_cache.cache_root() == Path.home() / ".cache" / "headlab"


def test_an_unwritable_cache_says_which_folder_and_the_variable(tiny_gguf, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError, match=f"{blocker}.*{CACHE_ENV}"):
        converted(tiny_gguf, blocker / "cache")


def _no_hashing(path):
    raise AssertionError(f"hashed {path} although its stat is the recorded one")


def test_a_file_whose_stat_is_recorded_is_not_hashed_again(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_cache, "RACY_NS", 0)  # as if the conversion were long ago
    folder = convert(tiny_gguf, tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(gguf_cache, "file_digest", _no_hashing)
        assert stale_reason(folder, tiny_gguf) is None


def test_a_write_that_keeps_size_and_modification_time_is_still_found(
    tiny_gguf, tmp_path, monkeypatch
):
    """The change time moves with every write and cannot be set back: the file is hashed."""
    import os
    import time

    monkeypatch.setattr(gguf_cache, "RACY_NS", 0)
    folder = convert(tiny_gguf, tmp_path)
    weights = folder / "model.safetensors"
    before = weights.stat()
    time.sleep(0.05)  # past the file system's timestamp tick
    _flip_a_byte(folder)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_size == before.st_size
    assert weights.stat().st_mtime_ns == before.st_mtime_ns
    assert "damaged" in stale_reason(folder, tiny_gguf)


def test_a_copied_cache_is_hashed_once_then_trusted(tiny_gguf, tmp_path, monkeypatch) -> None:
    import shutil

    monkeypatch.setattr(gguf_cache, "RACY_NS", 0)
    folder = convert(tiny_gguf, tmp_path / "a")
    copy = tmp_path / "b" / folder.name
    shutil.copytree(folder, copy)  # new inodes and change times: every stat differs
    hashed = []
    digest = gguf_cache.file_digest
    with monkeypatch.context() as patch:
        patch.setattr(gguf_cache, "file_digest", lambda p: hashed.append(p.name) or digest(p))
        assert stale_reason(copy, tiny_gguf) is None
    assert "model.safetensors" in hashed
    with monkeypatch.context() as patch:
        patch.setattr(gguf_cache, "file_digest", _no_hashing)
        assert stale_reason(copy, tiny_gguf) is None
    assert not [p for p in copy.iterdir() if p.name.startswith(".") and p.name != gguf_cache.MARK]
