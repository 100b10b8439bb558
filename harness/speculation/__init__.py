"""Speculation: predicting the next tool calls (the pattern analyzer) so they can run ahead of the model.

`patterns.Analyzer` is the entry point: fed a session's events, it returns ranked, runnable candidate
calls at three moments of a step. `model.PatternModel` is what it learned from past trajectories;
`canonical` decides when two calls are the same; `replay` is the no-look-ahead loop that trains and
benchmarks it. Importing this package does nothing.
"""
