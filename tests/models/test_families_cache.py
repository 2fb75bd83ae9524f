"""``model families`` keeps what observing every family showed, once per transformers version:
the second call reads it without observing (and without importing torch); an entry that is wrong
in any way (unreadable, over its bound, nested without end, mistyped, filed under another key,
naming families it did not observe) is observed again and rewritten; the cache folder is
$HEADLAB_CACHE."""

from __future__ import annotations

import json

import pytest

from cli_run import run
from headlab.models.hf import families
from headlab.models.hf.families_cache import cached_family_support
from headlab.models.hf.observe import Observation
from headlab.results import kept_families
from headlab.results.family_support import FamilySupport
from headlab.results.kept_families import entry_path, kept_family_support

FAMILIES = ["bloom", "dbrx", "llama", "t5"]
SEEN = {
    "bloom": Observation(),  # computes its attention itself
    "dbrx": Observation(error="its default config does not build (TypeError)"),
    "llama": Observation(module="LlamaAttention"),
    "t5": Observation(error=families.ENCODER_DECODER),
}


@pytest.fixture
def observed(monkeypatch, tmp_path):
    """Four families, observed by a stand-in that counts its calls; the cache in tmp_path."""
    calls = []

    def observe_family(family):
        calls.append(family)
        return SEEN[family]

    monkeypatch.setattr(families, "text_families", lambda: list(FAMILIES))
    monkeypatch.setattr(families, "observe_family", observe_family)
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path / "cache"))
    return calls


def test_the_second_call_reads_what_the_first_observed(observed, tmp_path):
    first = cached_family_support()
    assert (
        first == families.family_support() == FamilySupport(["llama"], {"dbrx": SEEN["dbrx"].error})
    )
    assert observed == FAMILIES * 2  # the call above, then the reference
    assert entry_path().parent == tmp_path / "cache" / "families"
    assert cached_family_support() == first
    assert observed == FAMILIES * 2  # read, not observed


def _corrupt(path, text: str) -> None:
    path.write_bytes(text.encode() if isinstance(text, str) else text)


def _document(path) -> dict:
    return json.loads(path.read_text())


WRONG = {
    "not JSON": lambda d: "{not json",
    "a list": lambda d: "[]",
    "nested without end": lambda d: "[" * 100_000 + "]" * 100_000,
    "over its bound": lambda d: json.dumps({**d, "pad": "x" * kept_families.MAX_ENTRY_BYTES}),
    "another format": lambda d: json.dumps({**d, "format": 0}),
    "another key": lambda d: json.dumps({**d, "key": "0" * 64}),
    "named families not observed": lambda d: json.dumps({**d, "observed": ["bloom", "t5"]}),
    "observed twice": lambda d: json.dumps({**d, "observed": [*FAMILIES, "t5"]}),
    "observed not a list": lambda d: json.dumps({**d, "observed": {"llama": 1}}),
    "no support": lambda d: json.dumps({k: v for k, v in d.items() if k != "support"}),
    "a supported family not observed": lambda d: json.dumps(
        {**d, "support": {"families": ["gpt2"], "not_observed": {}}}
    ),
    "a mistyped reason": lambda d: json.dumps(
        {**d, "support": {"families": ["llama"], "not_observed": {"dbrx": 7}}}
    ),
    "a family twice": lambda d: json.dumps(
        {**d, "support": {"families": ["llama", "llama"], "not_observed": {}}}
    ),
    "a huge number": lambda d: json.dumps({**d, "format": 10**5000}),
    "not UTF-8": lambda d: b"\xff\xfe{}",
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_a_wrong_entry_is_observed_again_and_rewritten(observed, wrong):
    import sys

    sys.set_int_max_str_digits(0)  # so that the huge number can be written at all
    try:
        good = cached_family_support()
        path = entry_path()
        document = _document(path)
        _corrupt(path, WRONG[wrong](document))
    finally:
        sys.set_int_max_str_digits(4300)
    assert kept_family_support() is None
    observed.clear()
    assert cached_family_support() == good
    assert observed == FAMILIES
    assert _document(path) == document  # rewritten as it was


def test_each_transformers_version_has_its_own_entry(observed, monkeypatch):
    cached_family_support()
    before = entry_path()
    installed = kept_families.versions()
    monkeypatch.setattr(kept_families, "versions", lambda: ["99.0.0", installed[1]])
    assert entry_path() != before
    observed.clear()
    cached_family_support()
    assert observed == FAMILIES  # observed again for the other version
    assert before.exists() and entry_path().exists()


def test_a_cache_that_cannot_be_written_costs_only_the_observation(observed, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HEADLAB_CACHE", str(blocker))
    assert cached_family_support() == FamilySupport(["llama"], {"dbrx": SEEN["dbrx"].error})
    assert cached_family_support() == FamilySupport(["llama"], {"dbrx": SEEN["dbrx"].error})
    assert observed == FAMILIES * 2
    assert blocker.read_text() == "not a folder"


def test_the_command_says_why_the_first_call_takes_long(observed, capsys):
    import transformers

    code, out, err = run(["model", "families"], capsys)
    assert code == 0, err
    assert err.splitlines() == [
        f"headlab: observing 4 families' forwards once for transformers "
        f"{transformers.__version__}: about a minute; later calls read the cache"
    ]
    code, again, err = run(["model", "families"], capsys)
    assert code == 0 and err == "" and again == out
    assert observed == FAMILIES
    code, document, err = run(["model", "families", "--json"], capsys)
    assert code == 0 and err == ""
    assert json.loads(document) == {
        "families": ["llama"],
        "not_observed": {"dbrx": SEEN["dbrx"].error},
    }


def test_a_kept_answer_is_read_without_torch(observed, tmp_path):
    """The second call's path imports neither torch nor transformers (a fresh interpreter)."""
    import os
    import subprocess
    import sys

    cached_family_support()
    code = (
        "import sys; from headlab.results.kept_families import kept_family_support; "
        "print(kept_family_support().to_dict()); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "HEADLAB_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str({"families": ["llama"], "not_observed": {"dbrx": SEEN["dbrx"].error}})
    assert lines[1] == "[]"
