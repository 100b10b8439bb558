"""The status region of the main screen."""
