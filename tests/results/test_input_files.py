"""The one reader of every file headlab opens: regular files only, JSON bounded in size and depth,
text streamed and cut at a word break. References: Python's own ``json`` and a recursive depth
of the parsed value; the file's bytes for the text cut."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.results.input_files import (
    MAX_JSON_DEPTH,
    NotRegularFile,
    check_model_folder,
    check_regular,
    json_depth,
    open_text,
    read_json,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ ab\n\u00e9'),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\x', max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


def depth(value: object) -> int:
    """The nesting of a parsed JSON value (the reference for ``json_depth``)."""
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@given(JSON_VALUES, st.booleans())
def test_the_depth_is_measured_from_the_bytes_as_the_parsed_value_nests(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=1 if ascii_only else None)
    assert json_depth(text.encode()) == depth(json.loads(text))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3 * MAX_JSON_DEPTH), st.sampled_from("[{"))
def test_json_nested_past_the_limit_is_refused_in_one_line(tmp_path_factory, n, kind):
    path = tmp_path_factory.mktemp("deep") / "deep.json"
    text = "[" * n + "]" * n if kind == "[" else '{"a": ' * n + "1" + "}" * n
    path.write_text(text)
    if n <= MAX_JSON_DEPTH:
        assert depth(read_json(path, "results", expected=object)) == n
    else:
        with pytest.raises(ValueError, match=f"nested at most {MAX_JSON_DEPTH} deep, got {n} "):
            read_json(path, "results")


def test_a_depth_past_the_parser_s_recursion_is_refused_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="got 200000 levels"):
        read_json(path, "--results")


def test_a_number_past_pythons_digit_limit_is_refused_naming_the_file(tmp_path):
    """Python's int parser refuses a number of more than 4300 digits with a ValueError that is
    not a JSONDecodeError (its message asks for sys.set_int_max_str_digits)."""
    path = tmp_path / "long-number.json"
    path.write_text('{"n": ' + "9" * 5000 + "}")
    with pytest.raises(ValueError) as error:
        read_json(path, "--results")
    message = str(error.value)
    assert message.startswith(f"--results {path}: ") and "digits" in message, message
    assert "set_int_max_str_digits" not in message and "\n" not in message


def test_a_file_over_the_size_limit_is_refused_after_reading_at_most_the_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"a": "' + "x" * 5000 + '"}')
    with pytest.raises(ValueError, match="at most 4096 bytes"):
        read_json(path, "config", max_bytes=4096)
    assert read_json(path, "config", max_bytes=6000)["a"] == "x" * 5000


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "socket"])
def test_only_regular_files_are_opened(tmp_path, kind):
    import socket

    path = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))  # the socket file stays after the socket closes
    what = {
        "fifo": "a FIFO",
        "dev-zero": "a character device",
        "folder": "a directory",
        "socket": "a socket",
    }[kind]
    with pytest.raises(NotRegularFile, match=f"config.json is {what}, expected a regular file"):
        read_json(path, "config")
    with pytest.raises(NotRegularFile):
        open_text(path, "--text-file")


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--results .*nowhere.json does not exist"):
        check_regular(tmp_path / "nowhere.json", "--results")


WORDS = st.lists(
    st.text(alphabet="ab\u00e9\u4e2d\U0001f600", min_size=1, max_size=9), min_size=1, max_size=60
)


@settings(max_examples=60, deadline=None)
@given(WORDS, st.sampled_from([" ", "\n", "  \t"]), st.integers(1, 40), st.integers(1, 64))
def test_a_streamed_text_is_the_shortest_whole_word_prefix_that_is_enough(
    tmp_path_factory, words, space, wanted, first_bytes
):
    """Reference: the file's own words. The text read is a prefix of the file made of whole
    words; it holds ``wanted`` words unless it is the whole file; multi-byte characters cut
    by a chunk boundary are never split."""
    path = tmp_path_factory.mktemp("text") / "t.txt"
    whole = space.join(words) + "\n"
    path.write_bytes(whole.encode())
    read = open_text(path, "--text-file").read_until(
        lambda prefix: len(prefix.split()) >= wanted, first_bytes=first_bytes
    )
    assert whole.startswith(read.text)
    assert read.text.split() == words[: len(read.text.split())]
    if read.complete:
        assert read.text == whole and read.cut_note() == ""
    else:
        assert len(read.text.split()) >= wanted
        assert read.cut_note() == f"cut from at least {len(whole.encode())} bytes"
        # doubling steps: never more than twice what the last test needed, plus a first step
        assert read.bytes_read <= max(first_bytes, 2 * len(read.text.encode()) + 2 * 9 * 4 + 8)


def test_a_large_text_is_read_only_as_far_as_the_cut_needs(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"word " * (10 * 2**20 // 5))  # 10 MiB
    read = open_text(path, "--text-file").read_until(lambda t: len(t.split()) > 1000)
    assert not read.complete and len(read.text.split()) > 1000
    assert read.bytes_read <= 2**14 + 2 * 5 * 1001
    assert "cut from at least 10485760 bytes" in read.cut_note()


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "x": [[1]]}))
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


@pytest.mark.parametrize(
    ("name", "make", "message"),
    [
        ("model.safetensors", "fifo", "model.safetensors is a FIFO, expected a regular file"),
        ("tokenizer_config.json", "dev-zero", "tokenizer_config.json is a character device"),
        ("tokenizer_config.json", "deep", "tokenizer_config.json: expected JSON nested at most"),
        ("config.json", "fifo", "config.json is a FIFO, expected a regular file"),
        ("tokenizer.json", "dangling", "tokenizer.json is a link to nothing"),
    ],
)
def test_a_model_folder_is_checked_before_transformers_reads_it(tmp_path, name, make, message):
    folder = model_folder(tmp_path)
    assert check_model_folder(folder) == folder
    path = folder / name
    path.unlink(missing_ok=True)
    if make == "fifo":
        os.mkfifo(path)
    elif make == "dev-zero":
        path.symlink_to("/dev/zero")
    elif make == "dangling":
        path.symlink_to(tmp_path / "gone")
    else:
        path.write_text("[" * 1000 + "]" * 1000)
    with pytest.raises(ValueError, match=message):
        check_model_folder(folder)


@settings(max_examples=60, deadline=None)
@given(WORDS, st.integers(1, 40), st.integers(1, 64))
def test_a_text_in_memory_is_cut_as_a_file_is(words, wanted, first_chars):
    """``prefix_until`` (what ``cut_text`` tokenises): a whole-word prefix that is enough, or
    the whole text; never more than twice the characters the test needed."""
    from headlab.results.input_files import prefix_until

    whole = " ".join(words)
    calls: list[int] = []

    def enough(prefix: str) -> bool:
        calls.append(len(prefix))
        return len(prefix.split()) >= wanted

    text = prefix_until(whole, enough, first_chars)
    assert whole.startswith(text) and text.split() == words[: len(text.split())]
    assert text == whole or len(text.split()) >= wanted
    assert sum(calls) <= 2 * max(len(text), first_chars)
