"""Speculation: predicting the next tool calls (the pattern analyzer) so they can run ahead of the model.

`patterns.Analyzer` is the entry point: fed a session's events, it returns ranked, runnable candidate
calls at three moments of a step. `pattern_model.PatternModel` is what it learned from past
trajectories; `rehearsal` is the no-look-ahead loop that trains and benchmarks it (what a call is, and when
two are the same, lives in `harness.calls`). Importing this package does nothing.
"""
