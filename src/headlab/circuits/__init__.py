"""How heads compose across layers: the graph of a model (graph.py), weight-based composition,
exact path patching, edge attribution (EAP, EAP-IG), circuit discovery and faithfulness.

Import what you need from its module (``headlab.circuits.graph`` ...); this package's namespace
stays empty so that its modules can be written side by side.
"""
