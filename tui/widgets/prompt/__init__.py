"""The prompt region of the main screen."""
