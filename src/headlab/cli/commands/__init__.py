"""The commands, one module each: ``<command>_command.py`` (``model_heads_command.py`` is
``headlab model heads``). A command module parses its options into the library's typed request,
calls the library and prints; it imports the shared CLI modules one folder up (options groups,
outputs, tables, progress), never another command module, and ``headlab.cli.app`` registers it.
"""
