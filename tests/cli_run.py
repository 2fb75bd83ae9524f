"""The CLI as the tests call it: ``run(argv, capsys)`` -> (exit code, stdout, stderr).

Importable from any test module (pytest puts ``tests/`` on the path for its conftest.py).
"""

from __future__ import annotations

from headlab.cli.main import main


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """headlab's entry point on ``argv``; exit code 0 when it returns without SystemExit."""
    try:
        main(argv)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err
