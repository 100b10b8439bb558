"""Running predicted calls ahead of the model: the scheduler and its records, launches of calls already
written out, chains past an edit, promotion of exact matches, observation warming.

Imports `harness.speculation.prediction` for the candidates; prediction never imports this room.
Importing this package does nothing.
"""
