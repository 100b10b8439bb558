"""The slash commands and what each does: one list for the help screen, the prompt's completion and the dispatcher.

A leaf of its own so that widgets (the prompt), screens (help) and tui.commands can all read it without importing
one another.
"""

COMMANDS = (
    ("/help", "show these commands and keys"),
    ("/diff", "what this session changed: the diff since its first checkpoint"),
    ("/undo", "put the files back as they were before the last turn that changed them (again: the one before)"),
    ("/clear", "clear the conversation for a new task (the model starts afresh; the trajectory keeps it all)"),
    ("/model", "the engine and model in use, and how to choose another"),
    ("/compact", "shorten the conversation the model sees"),
    ("/resume", "pick a saved session of this repository to go on with (before a task starts)"),
    ("@path", "in a message: attach that file of the repository for the model"),
)
