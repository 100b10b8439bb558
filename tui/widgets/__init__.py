"""The TUI's widgets, one folder per screen region."""
