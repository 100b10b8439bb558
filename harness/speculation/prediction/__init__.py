"""Predicting the next tool calls from a session's events: pure, no tools run, testable offline.

`patterns.Analyzer` is the entry point; `pattern_model.PatternModel` is what it learned, `training` learns
and adapts it by replaying sessions through `rehearsal`. Importing this package does nothing.
"""
