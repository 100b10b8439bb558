"""The conversation region of the main screen."""
