"""The workspace and its copy-on-write overlays, workspace versions and process limits (stdlib only)."""

from sandbox.process import ProcessResult, run_process
from sandbox.workspace import Workspace, WorkspaceEscape

__all__ = ["ProcessResult", "Workspace", "WorkspaceEscape", "run_process"]
