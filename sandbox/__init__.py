"""The workspace and its copy-on-write overlays, workspace versions and process limits.

Built on the standard library; only the git-worktree backend needs gitpython, which it alone imports (lazily).
"""

from sandbox.changes import Change, ChangeKind
from sandbox.sandbox_errors import BackendUnavailable, OverlayClosed, SandboxError, SetupFailed
from sandbox.limits import SPECULATIVE, Limits
from sandbox.overlay import Overlay
from sandbox.process import ProcessResult, run_process
from sandbox.protocols import WorkspaceView
from sandbox.workspace import Workspace, WorkspaceEscape

__all__ = [
    "SPECULATIVE",
    "BackendUnavailable",
    "Change",
    "ChangeKind",
    "Limits",
    "Overlay",
    "OverlayClosed",
    "ProcessResult",
    "SandboxError",
    "SetupFailed",
    "Workspace",
    "WorkspaceEscape",
    "WorkspaceView",
    "run_process",
]
