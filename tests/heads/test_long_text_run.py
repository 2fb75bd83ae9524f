"""``long_text_run``, the library's ``model heads --text-file``: the same statistics as
``long_text_statistics`` on the text it reads, only as much of the file as the cut keeps, and
its request's checks before any model loads."""

from __future__ import annotations

import numpy as np
import pytest

from headlab.heads.long_context import long_text_statistics
from headlab.heads.long_text_run import LongTextRequest, long_text_run


def _words(n: int) -> str:
    return " ".join(f"t{(13 * i) % 97}" for i in range(n))


def test_a_file_gives_the_statistics_of_its_text(tiny_llama, tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(_words(37), encoding="utf-8")
    result, cut = long_text_run(tiny_llama, LongTextRequest(path, sinks=2, window=5))
    expected = long_text_statistics(tiny_llama, _words(37), window=(2, 5), strict_window=True)
    assert cut == ""
    assert result.tokens == expected.tokens
    for name, values in expected.statistics.metrics.items():
        np.testing.assert_array_equal(result.statistics.metrics[name], values)


def test_a_cut_file_says_what_was_left(tiny_llama, tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(_words(59), encoding="utf-8")
    result, cut = long_text_run(tiny_llama, LongTextRequest(path, max_tokens=23, sinks=2, window=5))
    assert len(result.tokens) == 23
    assert "cut from at least" in cut


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_tokens": 9, "sinks": 4, "window": 8}, "not longer than sinks 4 \\+ window 8"),
        ({"sinks": -1}, "sinks must be between 0"),
        ({"max_tokens": 1}, "max_tokens must be between 2"),
    ],
)
def test_a_bad_request_is_refused_before_any_model(options, message):
    with pytest.raises(ValueError, match=message):
        LongTextRequest(**options)


def test_a_missing_file_is_refused_when_opened(tmp_path):
    with pytest.raises(FileNotFoundError):
        LongTextRequest(tmp_path / "none.txt").open()
