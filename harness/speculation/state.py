"""The live session as the analyzer sees it, updated one event at a time and never rescanned.

`SessionState.observe(event)` keeps what the data-flow rules need: the canonical actions so far with
their outcome, which call ran when and at which workspace version, files written and not yet run or
removed, paths and line numbers in the task and in the latest observation, the file texts seen whole
(for tree-sitter), and the agent's habits (its Python interpreter, its test commands).
"""

from __future__ import annotations

import posixpath
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from harness.events import Event, SessionStart, ToolCall, ToolResult
from harness.speculation import shell
from harness.speculation.action import CLEANUP, EDIT, READ, SCRIPT, TEST, WRITE, WRITE_RUN, Action, changes_workspace
from harness.speculation.canonical import canonical
from harness.speculation.extract import path_mentions

_NUMBERED = re.compile(r"(?m)^\s*\d+(?:\t|: |\| )")
_RUNNABLE = (".py", ".sh")
MAX_TEXT = 400_000  # characters of file text kept per file, for tree-sitter


@dataclass
class Step:
    """One executed call: its canonical action, the raw call, and what came back."""

    index: int
    action: Action
    name: str
    arguments: dict[str, Any]
    version: int  # workspace version when the call started
    exit_code: int | None = None
    ok: bool | None = None
    empty: bool | None = None
    mentions: list[tuple[str, int | None]] = field(default_factory=list)
    signal: str = "none"  # what the output says at a glance: traceback, error, failed, long, short, ...


@dataclass
class KeyStats:
    """How often a key ran, when last, at which version, and how it ended."""

    last: int
    count: int
    version: int
    name: str
    arguments: dict[str, Any]
    edits: int = 0  # the session's edit count when it last ran
    first_of_kind: bool = False
    ok: bool | None = None


class SessionState:
    """Incremental state of one session, fed by `observe`."""

    def __init__(self) -> None:
        self.task, self.root = "", ""
        self.task_mentions: list[tuple[str, int | None]] = []
        self.steps: list[Step] = []
        self.keys: OrderedDict[str, KeyStats] = OrderedDict()  # by recency, most recent last
        self.written: OrderedDict[str, int] = OrderedDict()  # files written -> last write's step, by recency
        self.created: dict[str, None] = {}  # files written, in the order first written
        self.ran_since_write: set[str] = set()
        self.removed: set[str] = set()
        self.texts: dict[str, tuple[int, str]] = {}  # path -> (version, whole text)
        self.interpreters: list[str] = []
        self.test_prefixes: list[str] = []  # test runners used, oldest first
        self.dotted: dict[str, bool] = {}  # runner -> whether it takes dotted module labels
        self.version = 0
        self.edits = 0  # edits of project files so far (not counting scratch scripts)
        self.kinds_seen: set[str] = set()
        self.format_errors = 0

    @property
    def last(self) -> Step | None:
        """The latest call, or None before the first."""
        return self.steps[-1] if self.steps else None

    def observe(self, event: Event) -> None:
        """Update the state with the next event of the session."""
        if isinstance(event, SessionStart):
            self.task, self.root = event.task, event.repo
            self.task_mentions = path_mentions(event.task, event.repo, limit=8)
        elif isinstance(event, ToolCall):
            self._call(event)
        elif isinstance(event, ToolResult):
            self._result(event)
        elif event.type == "format_error":
            self.format_errors += 1

    def _call(self, event: ToolCall) -> None:
        action = canonical(event.name, event.arguments, self.root)
        step = Step(len(self.steps), action, event.name, event.arguments, self.version)
        self.steps.append(step)
        stats = self.keys.pop(action.key, None)
        count = stats.count + 1 if stats else 1
        first = stats.first_of_kind if stats else action.kind not in self.kinds_seen
        self.kinds_seen.add(action.kind)
        writes = written_paths(action)
        if action.kind == EDIT or any("/" in path for path in writes):
            self.edits += 1
        self.keys[action.key] = KeyStats(step.index, count, self.version, event.name, event.arguments, self.edits,
                                         first)
        for path in writes:
            self.created.setdefault(path, None)
            self.written.pop(path, None)
            self.written[path] = step.index
            self.ran_since_write.discard(path)
            self.removed.discard(path)
        if action.kind in (SCRIPT, TEST, WRITE_RUN):
            self._habits(action)
        if action.kind == CLEANUP:
            self.removed.update(removed_paths(action))
        if changes_workspace(action) and self.texts:  # a file text seen before may be stale now
            command = str(action.args.get("command", ""))
            for path in [p for p in self.texts if p == action.path or p in writes or p in command]:
                del self.texts[path]

    def _result(self, event: ToolResult) -> None:
        step = self.last
        if step is None:
            return
        step.exit_code = event.exit_code
        step.ok = (not event.is_error) if event.exit_code is None else event.exit_code == 0
        step.empty = not event.output.strip()
        step.signal = output_signal(event.output, step.empty)
        step.mentions = path_mentions(event.output[:20_000], self.root)
        if step.action.tool == "list_files" and step.action.path:  # a listing names entries of its folder
            folder = step.action.path
            step.mentions = [(p if "/" in p else f"{folder}/{p}", line) for p, line in step.mentions]
        self.keys[step.action.key].ok = step.ok
        self.version = event.workspace_version
        action = step.action
        if action.kind == READ and action.tool == "read_file" and step.ok and not event.truncated_chars:
            self.texts[action.args["path"]] = (self.version, plain_text(event.output)[:MAX_TEXT])

    def _habits(self, action: Action) -> None:
        command = str(action.args.get("command", ""))
        words = command.split()
        for word in words:
            if posixpath.basename(word).startswith("python"):
                self.interpreters.append(word)
                break
        for path in list(self.written):
            if path in command:
                self.ran_since_write.add(path)
        if action.kind == TEST:
            runner, target = split_test(command)
            if target:
                if runner in self.test_prefixes:
                    self.test_prefixes.remove(runner)
                self.test_prefixes.append(runner)
                self.dotted[runner] = "/" not in target and not target.endswith(".py")

    def interpreter(self, default: str = "python") -> str:
        """The Python interpreter the agent used last (`python3`, `/usr/bin/python3`), else `default`."""
        return self.interpreters[-1] if self.interpreters else default


_ERROR = re.compile(r"\b(?:Error|Exception)\b")
_FAILED = re.compile(r"\b(?:FAILED|FAIL:|failed|failures?)\b")


def output_signal(output: str, empty: bool) -> str:
    """One word for the gist of an output, for control-flow features."""
    if empty:
        return "empty"
    if "Traceback (most recent call last)" in output:
        return "traceback"
    if _FAILED.search(output):
        return "failed"
    if _ERROR.search(output):
        return "error"
    return "long" if len(output) > 4000 else "short"


def plain_text(output: str) -> str:
    """A file's text from a read's output, without line-number prefixes when every line has one."""
    lines = output.splitlines(keepends=True)
    if lines and sum(1 for line in lines if _NUMBERED.match(line)) >= 0.9 * len(lines):
        return _NUMBERED.sub("", output)
    return output


def written_paths(action: Action) -> list[str]:
    """Files an action writes: write_file's path, or the `> file` targets of a shell write."""
    if action.tool == "write_file":
        return [action.args["path"]] if action.args.get("path") else []
    if action.tool != "bash" or action.kind not in (WRITE, WRITE_RUN):
        return []
    try:
        commands = shell.parse(str(action.args.get("command", "")))
    except shell.ShellSyntax:
        return []
    return [r.target for c in commands for r in c.redirects
            if r.op in (">", ">>") and r.target and not r.target.startswith("/dev/")]


def removed_paths(action: Action) -> list[str]:
    """The files an `rm` command names."""
    command = str(action.args.get("command", ""))
    return [w for w in command.split()[1:] if not w.startswith("-")]


def split_test(command: str) -> tuple[str, str | None]:
    """A test command's runner and target: `python tests/runtests.py a.b` -> (`python tests/runtests.py`, `a.b`)."""
    words = command.split()
    for index, word in enumerate(words[1:], 1):
        if word.startswith("-") or word in ("pytest", "unittest") or "runtests" in word or word.endswith("bin/test"):
            continue
        if posixpath.basename(word).startswith("python") or "=" in word:
            continue
        return " ".join(words[:index]), word
    return command, None


def test_target(runner: str, path: str, dotted: bool) -> str | None:
    """How `runner` names the test file `path`: the path, or a dotted label relative to the runner's folder."""
    if not dotted:
        return path
    script = next((w for w in runner.split() if w.endswith(".py")), "")
    folder = posixpath.dirname(posixpath.normpath(script)) if script else ""
    if folder and not path.startswith(folder + "/"):
        return None
    rel = path[len(folder) + 1:] if folder else path
    return rel.removesuffix(".py").replace("/", ".")
