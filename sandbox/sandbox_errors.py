"""The sandbox's errors, one short tree (WorkspaceEscape lives with the Workspace).

    SandboxError
     ├── BackendUnavailable   the backend asked for cannot work on this machine or workspace
     ├── SetupFailed          the sandbox for one run could not be built (a mount, a namespace)
     └── OverlayClosed        the overlay was already discarded
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base of every error the sandbox raises on purpose."""


class BackendUnavailable(SandboxError):
    """The requested overlay backend cannot work here; the message says why and what to use instead."""


class SetupFailed(SandboxError):
    """Building the sandbox for a run failed at `step` with `errno`."""

    def __init__(self, message: str, *, step: str = "", errno: int = 0) -> None:
        super().__init__(message)
        self.step = step
        self.errno = errno


class OverlayClosed(SandboxError):
    """run() or changes() on an overlay that was discarded."""
