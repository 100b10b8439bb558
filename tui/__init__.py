"""Tao's terminal UI: a Textual app that renders the session's events and sends the user's input."""
