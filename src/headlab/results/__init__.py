"""The results layer: every results file's schema checks and the one store that writes them.

``schema`` (field-by-field checks behind every ``from_dict``), ``json_store`` (one JSON document
per analysis, written atomically under the output policy), ``jsonl_store`` (append-only, locked
results rows; torn rows cut, foreign lines skipped), ``atomic_files`` (atomic writes, figures),
``output_policy`` (where headlab may write), ``locations`` (the default folders),
``input_files`` (the one bounded reader of every file headlab reads), ``interrupts`` (Ctrl-C and
SIGTERM with nothing half-written), ``defaults`` (the values the CLI's help shows). Nothing here
imports torch or a higher layer, so the report, the CLI and every analysis can import it.
"""
