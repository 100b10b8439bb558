"""Call syntax shared by speculation, traces and approval: actions, canonical keys, and reading shell commands.

`action` names what a call does, `canonical` decides when two calls are the same, `shellwords` reads a
one-line shell command and `shellmap` maps its simple commands to actions. Importing this package does nothing.
"""
