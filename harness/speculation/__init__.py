"""Speculation: predicting the next tool calls (the pattern analyzer) so they can run ahead of the model.

Two rooms. `prediction` is pure and testable offline: fed a session's events, `prediction.patterns.Analyzer`
returns ranked, runnable candidate calls at three moments of a step; `prediction.pattern_model.PatternModel`
is what it learned from past trajectories and `prediction.rehearsal` the no-look-ahead loop that trains and
benchmarks it. `running` runs those candidates against the real tools: the scheduler (overlays, promotion of
exact matches) and observation warming. `running` imports `prediction`, never the reverse. What a call is,
and when two are the same, lives in `harness.calls`. Importing this package does nothing.
"""
