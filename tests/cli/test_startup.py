"""The command starts fast: help and usage errors never import torch, NumPy or matplotlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "numpy", "matplotlib", "headlab.heads", "headlab.models", "headlab.report")

# Runs the CLI's entry point in a fresh interpreter and prints which heavy modules it imported.
PROBE = """
import json, sys
from headlab.cli.main import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit:
    pass
print(json.dumps([m for m in json.loads(sys.argv[2]) if m in sys.modules]), file=sys.stderr)
"""


def heavy_imports(argv: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_importing_the_app_does_not_import_torch():
    code = f"import sys, headlab.cli.app; print(sorted(m for m in sys.modules if m in {HEAVY!r}))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["model", "--help"],
        ["model", "heads", "--help"],
        ["sweep", "--help"],
        ["compare", "--help"],
        ["compare", "--no-such-option"],
    ],
)
def test_help_and_usage_errors_import_nothing_heavy(argv):
    assert heavy_imports(argv) == []
