"""The speculation region of the main screen."""
