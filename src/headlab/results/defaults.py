"""Names and defaults that the CLI's help shows, defined without importing torch or NumPy.

``headlab --help`` imports every command module; the values their options display live here so
that the modules can import the heavy libraries only inside the commands.
"""

from __future__ import annotations

INITS = ("rand", "normal", "xavier", "ones")  # weight draws of analysis.scenarios.CompareRequest
DEFAULT_TEXT = "The cat sat on the mat because it was warm and the dog lay by the door"
