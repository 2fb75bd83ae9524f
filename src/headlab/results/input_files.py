"""Every file headlab reads, read one way: a regular file, bounded in size, JSON bounded in depth.

A path that is not a regular file (a FIFO, a device such as ``/dev/zero``, a socket, a folder)
is refused in one line naming it, before it is opened: a FIFO would block the read for good, a
device would never end. The check follows symbolic links (the Hugging Face cache links every
file to a blob) and is made again on the opened descriptor, so a path swapped in between is
refused too.

JSON is read whole but never more than ``max_bytes``, and its nesting is measured on the bytes
before it is parsed: a document nested deeper than ``MAX_JSON_DEPTH`` is refused in one line
instead of exhausting the parser's recursion (``RecursionError``) or any code that walks it.

Text is streamed: ``TextFile.read_until`` reads a growing prefix, cut at a line or word break,
until the caller's test says it holds enough (the tokens a run needs); the rest of the file is
never read. ``transformers`` reads a checkpoint's JSON files itself: ``check_model_folder``
checks them (regular, size, depth) before the folder is handed to it.

Every error is a ValueError (FileNotFoundError for a missing path) whose message names the file,
so the CLI prints one line and exits 2. Imports no torch.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAX_JSON_BYTES = 64 * 2**20  # a results document or a model's config is far smaller
MAX_MODEL_JSON_BYTES = 256 * 2**20  # a tokenizer.json with a large vocabulary (~35 MB) fits
MAX_JSON_DEPTH = 64  # headlab's documents nest 6 deep, a tokenizer.json about 8
MAX_TEXT_BYTES = 64 * 2**20  # a text read whole (a corpus, a document); streamed texts are cut


class NotRegularFile(ValueError):
    """headlab will not open this path: it is not a regular file (the message says what it is)."""


def file_type(mode: int) -> str:
    """What a path that is not a regular file is, for messages: "a directory", "a FIFO"..."""
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def named(what: str, path: str | Path) -> str:
    """``--text-file t.txt`` for messages; the bare path when ``what`` is empty."""
    return f"{what} {path}" if what else str(path)


def _refusal(what: str, path: Path, mode: int) -> NotRegularFile:
    return NotRegularFile(f"{named(what, path)} is {file_type(mode)}, expected a regular file")


def check_regular(path: str | Path, what: str = "file") -> os.stat_result:
    """The ``stat`` of ``path`` (links followed) when it is a regular file; FileNotFoundError
    when it does not exist, NotRegularFile (a ValueError) naming it as ``what`` otherwise.
    Nothing is opened."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{named(what, path)} does not exist") from None
    except OSError as error:
        raise ValueError(f"{named(what, path)}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _refusal(what, path, info.st_mode)
    return info


def open_regular(path: str | Path, what: str = "file") -> BinaryIO:
    """``path`` opened for binary reading, once ``check_regular`` passed; the descriptor is
    opened without blocking and checked again (a FIFO swapped in since is refused, not waited
    on)."""
    path = Path(path)
    check_regular(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(what, path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, what: str = "file", max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of the regular file ``path``; ValueError, without reading the rest, when it
    holds more than ``max_bytes`` (checked on the size and again while reading)."""
    with open_regular(path, what) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(
            f"{named(what, path)}: expected at most {_size(max_bytes)}, got more (not read further)"
        )
    return data


def _size(nbytes: int) -> str:
    return f"{nbytes // 2**20} MiB" if nbytes >= 2**20 else f"{nbytes} bytes"


# A JSON string, escapes included (the unrolled form is linear); its brackets are not nesting.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 2**20


def json_depth(data: bytes) -> int:
    """How deeply the arrays and objects of the JSON text ``data`` nest (0 for a scalar), from
    its bytes alone: nothing is parsed, so any depth is measured in linear time."""
    import numpy as np

    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    steps = np.zeros(256, dtype=np.int64)
    steps[list(b"[{")], steps[list(b"]}")] = 1, -1
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):  # a running sum, a chunk at a time
        levels = depth + np.cumsum(steps[np.frombuffer(brackets[start : start + _CHUNK], np.uint8)])
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def check_depth(data: bytes, where: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """ValueError naming ``where`` when the JSON text ``data`` nests deeper than ``max_depth``."""
    depth = json_depth(data)
    if depth > max_depth:
        raise ValueError(
            f"{where}: expected JSON nested at most {max_depth} deep, got {depth} levels"
        )


def loads(text: str) -> object:
    """``json.loads``, whose one other ValueError (a number past Python's limit on the digits
    of an int, whose message asks for ``sys.set_int_max_str_digits``) becomes a
    ``JSONDecodeError`` at that number, as any other text that cannot be read is."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        limit = sys.get_int_max_str_digits()
        number = re.search(rf"[0-9]{{{limit + 1},}}", text)
        where = number.start() if number else 0
        raise json.JSONDecodeError(f"a number of more than {limit} digits", text, where) from None


def parse_json(data: bytes | str, where: str, max_depth: int = MAX_JSON_DEPTH) -> object:
    """The JSON value in ``data``; ValueError naming ``where`` for text that is not UTF-8, not
    JSON, or nested deeper than ``max_depth``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    check_depth(raw, where, max_depth)
    try:
        return loads(raw.decode("utf-8") if isinstance(data, bytes) else data)
    except UnicodeDecodeError:
        raise ValueError(f"{where}: expected UTF-8 JSON, got undecodable bytes") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error})") from None


def read_json(
    path: str | Path,
    what: str = "JSON file",
    *,
    expected: type = dict,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> dict | list:
    """The JSON document in the regular file ``path``, which must be an ``expected`` (dict or
    list); ValueError naming the file (as ``what``) for anything else: not a regular file, over
    ``max_bytes``, nested deeper than ``max_depth``, not UTF-8 JSON. FileNotFoundError when
    it does not exist."""
    where = named(what, path)
    data = parse_json(read_bytes(path, what, max_bytes), where, max_depth)
    if not isinstance(data, expected):
        name = "a JSON object" if expected is dict else "a JSON list"
        raise ValueError(f"{where}: expected {name}, got {type(data).__name__}")
    return data


def _decode(data: bytes, what: str, path: Path, final: bool) -> str:
    """``data`` as UTF-8; a character cut at the end of a prefix (``final`` False) is dropped."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if not final and error.start >= len(data) - 3 and error.reason == "unexpected end of data":
            return data[: error.start].decode("utf-8")
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{named(what, path)}:{line}: expected UTF-8 text, got undecodable bytes"
        ) from None


def _cut_at_break(text: str) -> str:
    """``text`` up to its last whitespace: a word cut at the end of a prefix would tokenise
    differently from the same word whole."""
    for index in range(len(text) - 1, -1, -1):
        if text[index].isspace():
            return text[: index + 1]
    return ""


def prefix_until(text: str, enough: Callable[[str], bool], first_chars: int = 2**14) -> str:
    """The shortest prefix of ``text`` cut at a whitespace (doubling from ``first_chars``) of
    which ``enough`` is true, or the whole text: what ``TextFile.read_until`` does to a file, for
    a text already in memory (so a long text is never tokenised whole to keep its start)."""
    size = max(1, first_chars)
    while size < len(text):
        prefix = _cut_at_break(text[:size])
        if prefix.strip() and enough(prefix):
            return prefix
        size *= 2
    return text


@dataclass(frozen=True)
class TextRead:
    """What ``TextFile.read_until`` read: ``text``, and whether it is the whole file
    (``complete``); else it was cut from a file of at least ``file_bytes`` bytes, of which
    ``bytes_read`` were read."""

    text: str
    complete: bool
    bytes_read: int
    file_bytes: int

    def cut_note(self) -> str:
        """``cut from at least 52428800 bytes`` for a cut read; "" for a whole file."""
        return "" if self.complete else f"cut from at least {self.file_bytes} bytes"


@dataclass(frozen=True)
class TextFile:
    """A UTF-8 text file checked before any long work (``open_text``), read later, perhaps in
    part. ``what`` names it in every message (the CLI passes its flag)."""

    path: Path
    what: str
    size: int

    def read(self, max_bytes: int = MAX_TEXT_BYTES) -> str:
        """The whole text; ValueError for a file over ``max_bytes``, not UTF-8, or blank."""
        if self.size > max_bytes:
            raise ValueError(
                f"{self.what} {self.path}: expected a text file of at most {_size(max_bytes)}, "
                f"got {self.size / 2**20:.0f} MiB"
            )
        text = _decode(read_bytes(self.path, self.what, max_bytes), self.what, self.path, True)
        if not text.strip():
            raise ValueError(f"{self.what} {self.path}: expected text, got an empty file")
        return text

    def read_tokens(self, count_tokens: Callable[[str], int], limit: int) -> TextRead:
        """The text as far as ``limit`` tokens need: the shortest whole-word prefix with more
        than ``limit`` tokens by ``count_tokens`` (so the cut is the tokenizer's, not a word's),
        or the whole text."""
        return self.read_until(lambda prefix: count_tokens(prefix) > limit)

    def read_until(self, enough: Callable[[str], bool], first_bytes: int = 2**14) -> TextRead:
        """The shortest prefix of the text, cut at a whitespace, of which ``enough(prefix)`` is
        true (or the whole text): read in doubling steps from ``first_bytes``, so at most about
        twice the bytes needed are read and tested. ValueError for bytes that are not UTF-8 or a
        blank text."""
        step, data = max(1, first_bytes), b""
        with open_regular(self.path, self.what) as handle:
            while True:
                chunk = handle.read(step - len(data))
                data += chunk
                at_end = len(data) < step
                if at_end:
                    text = _decode(data, self.what, self.path, True)
                    break
                prefix = _cut_at_break(_decode(data, self.what, self.path, False))
                if prefix.strip() and enough(prefix):
                    text = prefix
                    break
                step *= 2
        if not text.strip():
            raise ValueError(f"{self.what} {self.path}: expected text, got an empty file")
        return TextRead(text, at_end, len(data), max(self.size, len(data)))


def open_text(path: str | Path, what: str = "text file") -> TextFile:
    """A ``TextFile`` for ``path`` once it is known to be a non-empty regular file whose first
    bytes are UTF-8: the checks that can run before a model loads. FileNotFoundError for a
    missing file, ValueError naming it (as ``what``) otherwise."""
    path = Path(path)
    size = check_regular(path, what).st_size
    with open_regular(path, what) as handle:
        head = handle.read(2**16)
    if not head.strip() and len(head) < 2**16:
        raise ValueError(f"{what} {path}: expected text, got an empty file")
    _decode(head, what, path, len(head) < 2**16)
    return TextFile(path, what, size)


def read_text_file(path: str | Path, what: str = "text file") -> str:
    """The whole of a UTF-8 text file of at most ``MAX_TEXT_BYTES`` that holds some text."""
    return open_text(path, what).read()


MODEL_JSON = (".json",)


def check_model_folder(folder: str | Path, what: str = "model folder") -> Path:
    """Check a checkpoint folder before transformers reads it: every file in it is a regular
    file (links followed), and every JSON file holds at most ``MAX_MODEL_JSON_BYTES`` nested at
    most ``MAX_JSON_DEPTH`` deep. Sub-folders are left alone (transformers reads none by
    default). Returns the folder; ValueError naming the file otherwise."""
    folder = Path(folder)
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            continue
        name = f"{what} {folder}: {entry.name}"
        try:
            info = os.stat(entry)
        except FileNotFoundError:
            raise ValueError(f"{name} is a link to nothing, expected a regular file") from None
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(f"{name} is {file_type(info.st_mode)}, expected a regular file")
        if entry.suffix in MODEL_JSON:
            check_depth(read_bytes(entry, name, MAX_MODEL_JSON_BYTES), name)
    return folder
