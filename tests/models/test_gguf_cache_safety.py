"""What the GGUF cache may delete, what it trusts, and what it leaves when a write fails.

- A folder headlab did not mark as its own (a user's folder named like the conversion, a
  ``.tmp-*`` folder it did not make) is never deleted or replaced; a GGUF's name is never a path
  (``..gguf`` converts into a folder inside the cache root, which keeps everything it held).
- The cache is keyed by content: a different GGUF with the same size and modification time
  (``cp -p``) is hashed and converted again.
- A full disk during the conversion (safetensors' own error, which is not an OSError) is one
  OSError naming the cache, and leaves the cache as it was.
- The manifest is read by the bounded, typed reader: a wrong type, a deep nesting, a name that
  is a path make the folder stale (converted again), never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from gguf_files import TOKENS, WIDTH, write_llama_gguf

from headlab.models import gguf_cache
from headlab.models.gguf_cache import MANIFEST, converted, stale_reason
from headlab.notices import CacheNotice


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return write_llama_gguf(tmp_path / "tiny-llama.gguf")


def convert(gguf: Path, root: Path) -> Path:
    with pytest.warns(CacheNotice, match=str(root)):
        return converted(gguf, root)


def _listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (lock files aside) -> its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def test_a_users_folder_named_like_the_conversion_is_never_replaced(tiny_gguf, tmp_path):
    root = tmp_path / "cache"
    mine = root / "tiny-llama"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my own notes")
    (mine / "config.json").write_text("{}")
    before = _listing(root)
    assert "not headlab's" in stale_reason(mine, tiny_gguf)
    with pytest.raises(FileExistsError, match=f"{mine}.*not.*headlab"):
        converted(tiny_gguf, root)
    assert _listing(root) == before


def test_a_link_named_like_the_conversion_is_never_followed_or_replaced(tiny_gguf, tmp_path):
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("kept")
    root.mkdir()
    (root / "tiny-llama").symlink_to(elsewhere)
    with pytest.raises(FileExistsError, match=r"not.*headlab"):
        converted(tiny_gguf, root)
    assert (root / "tiny-llama").is_symlink()
    assert (elsewhere / "keep.txt").read_text() == "kept"


@pytest.mark.parametrize("name", ["..gguf", "...gguf", "a b?*.gguf"])
def test_a_ggufs_name_is_never_a_path(name, tiny_gguf, tmp_path):
    gguf = tmp_path / "in" / name
    gguf.parent.mkdir()
    shutil.copy(tiny_gguf, gguf)
    root = tmp_path / "cache"
    root.mkdir()
    (root / "keep.txt").write_text("kept")
    folder = convert(gguf, root)
    assert folder.parent == root and folder.name not in ("", ".", "..")
    assert not folder.name.startswith(".")
    assert (root / "keep.txt").read_text() == "kept"
    assert stale_reason(folder, gguf) is None
    assert converted(gguf, root) == folder  # found again, not converted again


def test_a_leftover_headlab_did_not_mark_is_kept(tiny_gguf, tmp_path):
    """A ``.tmp-`` folder named like a dead conversion's but without headlab's mark is a
    user's: kept, whatever it holds."""
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    theirs = tmp_path / f".tmp-tiny-llama-{dead}-mine"
    theirs.mkdir()
    (theirs / "data.bin").write_bytes(b"theirs")
    convert(tiny_gguf, tmp_path)
    assert (theirs / "data.bin").read_bytes() == b"theirs"


def _same_size_other_weights(gguf: Path, tmp_path: Path) -> Path:
    import numpy as np

    embedding = np.full((len(TOKENS), WIDTH), 0.25, dtype=np.float32)
    other = tmp_path / "other" / gguf.name
    write_llama_gguf(other, tensors={"token_embd.weight": embedding})
    assert other.stat().st_size == gguf.stat().st_size
    return other


def test_a_different_gguf_with_the_same_size_and_time_is_converted_again(tiny_gguf, tmp_path):
    (tmp_path / "other").mkdir()
    root = tmp_path / "cache"
    folder = convert(tiny_gguf, root)
    before = (folder / "model.safetensors").read_bytes()
    other = _same_size_other_weights(tiny_gguf, tmp_path)
    stamp = tiny_gguf.stat()
    os.utime(other, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    shutil.copy2(other, tiny_gguf)  # cp -p: the same size and modification time
    assert tiny_gguf.stat().st_mtime_ns == stamp.st_mtime_ns
    assert "changed" in stale_reason(folder, tiny_gguf)
    convert(tiny_gguf, root)
    assert (folder / "model.safetensors").read_bytes() != before


def test_the_gguf_is_hashed_once_per_change_of_its_stat(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_cache, "RACY_NS", 0)
    folder = convert(tiny_gguf, tmp_path / "cache")
    copy = tmp_path / "copy" / tiny_gguf.name
    copy.parent.mkdir()
    shutil.copy2(tiny_gguf, copy)  # the same bytes, another stat
    hashed = []
    digest = gguf_cache.file_digest
    with monkeypatch.context() as patch:
        patch.setattr(gguf_cache, "file_digest", lambda p: hashed.append(p) or digest(p))
        assert stale_reason(folder, copy) is None
        assert hashed == [copy]  # the GGUF, once; the written files' stats are recorded
        assert stale_reason(folder, copy) is None
        assert hashed == [copy]


#: what safetensors raises when the disk fills (seen on a 256 kB tmpfs): not an OSError
FULL = "Error while serializing: I/O error: No space left on device (os error 28)"


def _full_disk(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError(FULL)


def _stale_conversion(gguf: Path, root: Path) -> Path:
    """A conversion of ``gguf`` in ``root``, made stale by new weights in ``gguf``."""
    import numpy as np

    folder = convert(gguf, root)
    embedding = np.full((len(TOKENS), WIDTH), 0.5, dtype=np.float32)
    write_llama_gguf(gguf, tensors={"token_embd.weight": embedding})
    return folder


def _check_full_disk(gguf: Path, root: Path, folder: Path) -> None:
    before = _listing(root)
    with pytest.raises(OSError) as caught:
        converted(gguf, root)
    message = str(caught.value)
    assert "\n" not in message and str(root) in message and "No space left" in message
    assert _listing(root) == before  # the stale conversion as it was, no half-written folder
    assert not list(root.glob(".tmp-*"))
    assert stale_reason(folder, gguf) is not None  # still stale: converted when there is room


def test_a_full_disk_is_one_line_and_leaves_the_cache_as_it_was(tiny_gguf, tmp_path, monkeypatch):
    import safetensors.torch

    root = tmp_path / "cache"
    folder = _stale_conversion(tiny_gguf, root)
    monkeypatch.setattr(safetensors.torch, "save_file", _full_disk)
    _check_full_disk(tiny_gguf, root, folder)


@pytest.fixture
def small_disk(tmp_path):
    """A 128 kB file system (tmpfs), where one can be mounted (root on Linux); else skipped."""
    import subprocess

    point = tmp_path / "small"
    point.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(point)]
    mounted = os.geteuid() == 0 and subprocess.run(mount, capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("no file system of limited size can be mounted here")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_a_really_full_disk_leaves_the_cache_as_it_was(tiny_gguf, small_disk):
    root = small_disk / "cache"
    folder = _stale_conversion(tiny_gguf, root)
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    (small_disk / "filler").write_bytes(b"x" * (free - 8192))  # room for the small files only
    _check_full_disk(tiny_gguf, root, folder)


def test_a_failed_write_of_a_small_file_is_one_line_too(tiny_gguf, tmp_path, monkeypatch):
    import errno

    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "config.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left"):
        converted(tiny_gguf, tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


MANIFESTS = {
    "source is a string": lambda m: json.dumps({**m, "source": "tiny-llama.gguf"}),
    "files is a list": lambda m: json.dumps({**m, "files": ["config.json"]}),
    "a file's facts are a number": lambda m: json.dumps({**m, "files": {"config.json": 5}}),
    "a stat of strings": lambda m: json.dumps(
        {**m, "files": {k: {**v, "stat": ["a", "b", "c", "d"]} for k, v in m["files"].items()}}
    ),
    "a huge size": lambda m: json.dumps(
        {**m, "files": {k: {**v, "size": 10**40} for k, v in m["files"].items()}}
    ),
    "a name that is a path": lambda m: json.dumps(
        {**m, "files": {"../../tiny-llama.gguf": next(iter(m["files"].values()))}}
    ),
    "nested without end": lambda m: "[" * 200_000,
    "a list": lambda m: "[]",
}


@pytest.mark.parametrize("damage", MANIFESTS)
def test_a_manifest_of_wrong_types_makes_the_folder_stale(damage, tiny_gguf, tmp_path):
    folder = convert(tiny_gguf, tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(MANIFESTS[damage](manifest))
    assert stale_reason(folder, tiny_gguf) is not None
    with pytest.warns(CacheNotice):
        assert converted(tiny_gguf, tmp_path) == folder
    assert stale_reason(folder, tiny_gguf) is None


def test_a_file_the_manifest_does_not_list_makes_the_folder_stale(tiny_gguf, tmp_path):
    folder = convert(tiny_gguf, tmp_path)
    (folder / "added_tokens.json").write_text('{"w": 7}')
    assert "does not list" in stale_reason(folder, tiny_gguf)


def test_the_cli_names_a_users_folder_in_the_way_and_keeps_it(tmp_path, monkeypatch, capsys):
    from cli_run import run
    from headlab.models.packaged import packaged_smollm2

    mine = tmp_path / gguf_cache.folder_name(packaged_smollm2())
    mine.mkdir()
    (mine / "notes.txt").write_text("my own notes")
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path))
    code, _, err = run(["model", "heads", "--model", "smollm2"], capsys)
    assert code == 2
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert str(mine) in line and "not headlab's" in line
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
