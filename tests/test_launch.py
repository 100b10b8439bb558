"""The one session builder (harness.launch): sessions get what their options say, and only it builds them."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.approval import ApprovalPolicy
from harness.cli import build_parser
from harness.engine.recorded import Recording, ReplayEngine
from harness.launch import SessionOptions, open_session
from harness.session import SessionConfig
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tools import default_tools

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("harness", "tools", "tui", "sandbox")


def product_files() -> list[Path]:
    return [path for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))]


def test_the_flags_defaults_are_the_options_defaults(tmp_path: Path) -> None:
    """`tao run` with no limit flags runs with the limits SessionOptions holds: the defaults have one home."""
    args = build_parser().parse_args(["run", "--repo", str(tmp_path), "task"])
    options = SessionOptions.from_args(args, tmp_path)
    assert options.config == SessionOptions().config == SessionConfig()
    assert (options.warm, options.provisional, options.speculation) == (True, False, True)


def test_a_session_gets_what_its_options_say(tmp_path: Path) -> None:
    """Limits, warming, provisional steps, tools and the approval policy all come from the options."""
    workspace = Workspace(make_calc_repo(tmp_path))
    try:
        engine = ReplayEngine(Recording([]))
        policy = ApprovalPolicy("read-only")
        options = SessionOptions(config=SessionConfig(max_steps=3), approvals=policy, provisional=True,
                                 test_command="make check")
        session = open_session(options, "task", engine, workspace)
        assert session.config.max_steps == 3 and session.task == "task"
        assert session.approval is not None and session.approval.mode == "read-only"
        assert session.approval is not policy  # each session answers "always" for itself
        assert session.inbox is None  # not interactive: no follow-ups
        assert sorted(session.tools) == sorted(tool.name for tool in default_tools(test_command="make check"))
        batch = open_session(SessionOptions(), "task", engine, workspace)
        assert batch.approval is None and batch.speculation is None  # no policy, no analyzer: all runs, none ahead
        assert open_session(SessionOptions(interactive=True), "task", engine, workspace).inbox is not None
    finally:
        workspace.close()


def test_only_the_launcher_builds_a_session() -> None:
    """No product module calls harness.session's Session(...) itself: every session is built by
    harness.launch.open_session (the replay benchmark's own `Session` class is another thing)."""
    builders = []
    for path in product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = any(isinstance(node, ast.ImportFrom) and node.module == "harness.session"
                       and any(alias.name == "Session" for alias in node.names) for node in ast.walk(tree))
        for node in ast.walk(tree):
            if imported and isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Session":
                builders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert builders == []


def test_nothing_imports_the_command_line_front_end() -> None:
    """harness.cli is only the argparse front end: no product module imports it (no import circle through it)."""
    importers = []
    for path in product_files():
        if path == ROOT / "harness" / "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name == "harness.cli" for name in names) or (
                    isinstance(node, ast.ImportFrom) and node.module == "harness"
                    and any(alias.name == "cli" for alias in node.names)):
                importers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert importers == []
