"""The TUI's screens beyond the main one: approval, workspace diff, keys."""
