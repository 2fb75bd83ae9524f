"""The stdlib-docstring corpus and corpus files."""

from __future__ import annotations

import pytest

from headlab.models import default_corpus, read_corpus


def test_default_corpus_is_deterministic_distinct_prose():
    texts = default_corpus(50)
    assert texts == default_corpus(50)
    assert len(set(texts)) == 50
    assert all(8 <= len(t.split()) <= 80 and "\n" not in t for t in texts)
    assert default_corpus(20) == texts[:20]


def test_default_corpus_errors():
    with pytest.raises(ValueError, match="n_texts must be positive, got 0"):
        default_corpus(0)
    with pytest.raises(ValueError, match="n_texts must be at most"):
        default_corpus(10**6)


def test_read_corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one text\n\n  two text  \nthree\n", encoding="utf-8")
    assert read_corpus(path) == ["one text", "two text", "three"]
    assert read_corpus(path, 2) == ["one text", "two text"]
    with pytest.raises(ValueError, match="at least 2 non-empty lines, got 1"):
        read_corpus(path, 1)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_corpus(tmp_path / "none.txt")
