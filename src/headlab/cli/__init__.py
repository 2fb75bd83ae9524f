"""The command line: one module per command group; each parses, calls the library, prints."""
