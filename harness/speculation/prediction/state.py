"""The live session as the analyzer sees it, updated one event at a time and never rescanned.

`SessionState.observe(event)` keeps what the data-flow rules need: the canonical actions so far with
their outcome, which call ran when and at which workspace version, files written and not yet run or
removed (and what the session made anew), edits (scripts that rewrite project files count), paths and
line numbers in the task and in the latest observation, every path seen in any output or listing, the
name parts of the files the session works on (to rank test files and folders by relevance), the file
texts seen whole (for tree-sitter), and the agent's habits (its Python interpreter, its test commands).
"""

from __future__ import annotations

import posixpath
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.events import Event, SessionStart, ToolCall, ToolResult
from harness.calls import shellwords
from harness.calls.action import (CLEANUP, EDIT, LIST, READ, SCRIPT, SEARCH, SHELL, TEST, VIEW, WRITE, WRITE_RUN,
                                        Action, changes_workspace, norm_path)
from harness.calls.canonical import canonical
from harness.speculation.prediction.extract import blank_long_runs, path_mentions
from harness.calls.runners import file_language, is_test_file, runner_length
from harness.calls.shellmap import command_kind

_NUMBERED = re.compile(r"(?m)^\s*\d+(?:\t|: |\| |\u2192)")
_RUNNABLE = (".py", ".sh")
MAX_TEXT = 400_000  # characters of file text kept per file, for tree-sitter
MAX_PARTS = 64  # folders in a path the analyzer takes in; deeper ones name no project file worth predicting


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
    entries: list[str] = field(default_factory=list)  # what a listing shows, joined to its folder
    call_id: str = ""  # the call's id, which its result carries


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
    after: int = -1  # the workspace version when its last run ended (-1 while it runs)


class SessionState:
    """Incremental state of one session, fed by `observe`."""

    def __init__(self) -> None:
        self.task, self.root = "", ""
        self.tools: set[str] = set()  # the tools the session offers (Tao's own, when it is a Tao session)
        self.task_mentions: list[tuple[str, int | None]] = []
        self.steps: list[Step] = []
        self.keys: OrderedDict[str, KeyStats] = OrderedDict()  # by recency, most recent last
        self.written: OrderedDict[str, int] = OrderedDict()  # files written -> last write's step, by recency
        self.created: dict[str, None] = {}  # files written, in the order first written
        self.scratch: dict[str, bool] = {}  # files and folders (True) the session made anew, in order made
        self.ran_since_write: set[str] = set()
        self.removed: set[str] = set()
        self.texts: dict[str, tuple[int, str]] = {}  # path -> (version, whole text)
        self.interpreters: list[str] = []  # Python interpreters of script runs (else of test runs), latest last
        self.test_prefixes: list[str] = []  # test runners used, oldest first
        self.last_test: tuple[str, str, int] | None = None  # the latest test command: (runner, the rest, step)
        self.dotted: dict[str, bool] = {}  # runner -> whether it takes dotted module labels
        self.version = 0
        self.edits = 0  # edits of project files so far (not counting scratch scripts)
        self.kinds_seen: set[str] = set()
        self.format_errors = 0
        self.last_edit = -1  # index of the latest step that edited project files
        self.seen: set[str] = set()  # paths named in any output so far, listing entries included
        self.seen_dirs: set[str] = set()  # the folders of those paths, and their parents
        self.listed: set[str] = set()  # folders a whole listing showed the files of: a file not shown is not there
        self.by_name: dict[str, str] = {}  # a file name -> the latest nested path seen with that name
        self.modifiers: set[str] = set()  # scripts written this session that write files when run
        self.focus: dict[str, int] = {}  # name parts of the files the session works on (and of the task), by weight
        self._focus5: dict[str, int] = {}  # the same by their first five letters
        self.tops: dict[str, int] = {}  # top-level folders of the files worked on, by weight
        self.test_places: list[str] = []  # seen paths in test folders (test modules and folders), in order seen
        self._focus_changes = 0
        self._relevance_at = 0
        self._relevance: dict[str, int] = {}  # relevance by path, valid while the focus is unchanged
        self.command_words: set[str] = set()  # the words of the shell commands run so far
        self._relevant: tuple[tuple[int, int], list[tuple[str, int]]] = ((-1, -1), [])

    @property
    def last(self) -> Step | None:
        """The latest call, or None before the first."""
        return self.steps[-1] if self.steps else None

    def observe(self, event: Event) -> None:
        """Update the state with the next event of the session."""
        if isinstance(event, SessionStart):
            self.task, self.root = event.task, event.repo
            self.tools = set(event.tools)
            self.task_mentions = path_mentions(event.task, event.repo, limit=8)
            for word in set(_TASK_WORD.findall(event.task.lower())):
                self._weigh(word, 1)
            for path, _ in self.task_mentions:
                self._attend(path, 2)
        elif isinstance(event, ToolCall):
            self._call(event)
        elif isinstance(event, ToolResult):
            self._result(event)
        elif event.type == "format_error":
            self.format_errors += 1

    def _call(self, event: ToolCall) -> None:
        action = canonical(event.name, event.arguments, self.root)
        step = Step(len(self.steps), action, event.name, event.arguments, self.version, call_id=event.call_id)
        self.steps.append(step)
        stats = self.keys.pop(action.key, None)
        count = stats.count + 1 if stats else 1
        first = stats.first_of_kind if stats else action.kind not in self.kinds_seen
        self.kinds_seen.add(action.kind)
        raw = event.arguments.get("command") if isinstance(event.arguments, dict) else None
        raw = raw if isinstance(raw, str) else None
        writes = self._writes(action, raw)
        if action.path and action.kind in (READ, VIEW, EDIT, SEARCH) and "/" in action.path:
            self._attend(action.path, 3 if action.kind == EDIT else 2)
            self._see([action.path])
        if action.kind == EDIT or any("/" in path for path in writes) or self._runs_modifier(action):
            self.edits += 1
            self.last_edit = step.index
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

    def _writes(self, action: Action, raw: str | None) -> list[str]:
        """The files a call writes; notes what it makes anew, the folders it makes, and scripts that edit."""
        if raw is not None:
            self.command_words.update(word.removeprefix("./") for word in raw.split()[:50])
        writes = [path for path in (norm_path(p, self.root) for p in written_paths(action, raw)) if path]
        for path in writes:
            if path not in self.seen and path not in self.created:
                self.scratch.setdefault(path, False)  # a new file, not one of the project's
            content = action.args.get("content") if action.tool == "write_file" else action.args.get("command")
            if path.endswith(".py") and isinstance(content, str) and _WRITES_FILES.search(content) \
                    and _PROJECT_PATH.search(blank_long_runs(content)):
                self.modifiers.add(path)
            else:
                self.modifiers.discard(path)
        if raw is not None and "mkdir" in raw and action.kind in (SHELL, CLEANUP, SCRIPT, WRITE, WRITE_RUN):
            for folder in made_dirs(raw, self.root):
                if folder not in self.seen_dirs and folder not in self.seen:
                    self.scratch.setdefault(folder, True)
        return writes

    def _result(self, event: ToolResult) -> None:
        step = self._called(event.call_id)
        if step is None:
            return  # the result of no call made: a malformed one the session answered without running it
        step.exit_code = event.exit_code
        step.ok = (not event.is_error) if event.exit_code is None else event.exit_code == 0
        step.empty = not event.output.strip()
        step.signal = output_signal(event.output, step.empty)
        text = event.output[:20_000]
        step.mentions = path_mentions(text, self.root)
        if step.action.tool == "list_files":  # a listing names entries of its folder
            folder = step.action.path
            step.mentions = [(p if "/" in p or not folder else f"{folder}/{p}", line) for p, line in step.mentions]
            step.entries = tree_entries(text) if is_tree(text) else listing_entries(text, folder or "")
            self._see(step.entries)
            self._listed(step.entries, event)
        elif step.action.kind == LIST and str(step.action.args.get("command", "")).startswith("ls -R"):
            step.entries = listing_entries(text, "")  # its `dir:` headers say where
            self._see(step.entries)
            self._listed(step.entries, event)
        self._see(path for path, _ in step.mentions)
        stats = self.keys[step.action.key]
        stats.ok, stats.after = step.ok, event.workspace_version
        self.version = event.workspace_version
        action = step.action
        if action.kind == READ and action.tool == "read_file" and step.ok and not event.truncated_chars:
            self.texts[action.args["path"]] = (self.version, plain_text(event.output)[:MAX_TEXT])

    def _called(self, call_id: str) -> Step | None:
        """The recent call a result answers: the one of its id (calls of one turn may end in any order), else
        the latest call when either has no id; None when it answers none of the recent calls."""
        step = self.last
        if step is None or not (step.call_id and call_id) or step.call_id == call_id:
            return step
        return next((s for s in reversed(self.steps[-16:]) if s.call_id == call_id), None)

    def _habits(self, action: Action) -> None:
        command = str(action.args.get("command", ""))
        words = command.split()
        for word in words:
            if posixpath.basename(word).startswith("python"):
                if action.kind != TEST or not self.interpreters:
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
                self.dotted[runner] = ("/" not in target and not target.endswith(".py")
                                       and not runner_length(runner.split()))  # other ecosystems: paths or names
                self.last_test = (runner, command[len(runner):].strip(), len(self.steps) - 1)

    def _listed(self, entries: list[str], event: ToolResult) -> None:
        """Remember the folders whose files a listing showed, unless it was cut short."""
        if event.truncated_chars or len(event.output) > 20_000 or "[showing " in event.output:
            return
        self.listed.update(posixpath.dirname(entry) for entry in entries)

    def _see(self, paths: Iterable[str]) -> None:
        """Take in paths named by a call or an output, with their folders (each folder once)."""
        for path in paths:
            if path.count("/") > MAX_PARTS:
                continue  # its folders would each be checked against all the others
            if "/" in path and not path.startswith("/"):
                self.by_name[posixpath.basename(path)] = path
            if path not in self.seen:
                self.seen.add(path)
                if _in_tests(path):
                    self.test_places.append(path)
                folder = posixpath.dirname(path)
                while folder and folder not in self.seen_dirs:
                    self.seen_dirs.add(folder)
                    if _in_tests(folder) and folder not in self.seen:
                        self.test_places.append(folder)
                    folder = posixpath.dirname(folder)

    def relevant_tests(self, count: int = 3) -> list[tuple[str, int]]:
        """The test files and folders seen so far whose names best match what the session works on, with the
        match's weight (recomputed only when something new was seen or the focus changed)."""
        stamp = (len(self.test_places), self._focus_changes)
        if self._relevant[0] != stamp:
            scored = [(self.relevance(path), index) for index, path in enumerate(self.test_places)]
            best = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))[:8]
            self._relevant = (stamp, [(self.test_places[index], weight) for weight, index in best])
        return self._relevant[1][:count]

    def _attend(self, path: str, weight: int) -> None:
        if "/" in path and not path.startswith("/"):
            top = path.split("/", 1)[0]
            self.tops[top] = self.tops.get(top, 0) + weight
            if top in _CONTAINERS and path.count("/") >= 2:  # src/pkg/x.py: the package is src/pkg
                inner = "/".join(path.split("/", 2)[:2])
                self.tops[inner] = self.tops.get(inner, 0) + weight
        for part in name_parts(path):
            self._weigh(part, weight)

    def _weigh(self, part: str, weight: int) -> None:
        if self.focus.get(part, 0) < weight:
            self._focus_changes += 1
        self.focus[part] = max(self.focus.get(part, 0), weight)
        if len(part) >= 5:
            self._focus5[part[:5]] = max(self._focus5.get(part[:5], 0), weight)

    def resolve(self, path: str) -> str:
        """A bare file name as the nested path it was last seen at (`engine.py` -> `django/template/engine.py`),
        unless a file of that name was seen at the root; other paths as they are."""
        if "/" in path or path in self.seen or path in self.created:
            return path
        return self.by_name.get(path, path)

    def package(self) -> str | None:
        """The folder of the package the session works in most (`django`, `lib/matplotlib`), None before any."""
        if not self.tops:
            return None
        top = max(self.tops, key=self.tops.__getitem__)
        inner = [(weight, path) for path, weight in self.tops.items() if path.startswith(top + "/")]
        return max(inner)[1] if top in _CONTAINERS and inner else top

    def relevance(self, path: str) -> int:
        """How strongly a file's name parts match the files the session works on (0: not at all)."""
        if self._relevance_at != self._focus_changes:
            self._relevance_at, self._relevance = self._focus_changes, {}
        found = self._relevance.get(path)
        if found is None:
            found = self._relevance[path] = sum(
                self.focus.get(part, 0) or (self._focus5.get(part[:5], 0) if len(part) >= 5 else 0)
                for part in name_parts(path))
        return found

    def _runs_modifier(self, action: Action) -> bool:
        """Whether a script run executes a script of this session that writes files (an edit by script)."""
        if action.kind not in (SCRIPT, WRITE_RUN) or not self.modifiers:
            return False
        command = str(action.args.get("command", ""))
        return any(path in command for path in self.modifiers)

    def interpreter(self, default: str = "python") -> str:
        """The Python interpreter the agent used last (`python3`, `/usr/bin/python3`), else `default`."""
        return self.interpreters[-1] if self.interpreters else default


# A script that writes files when run: it opens a file for writing or calls a write method.
_WRITES_FILES = re.compile(r"""open\([^)]*['"][wa]\+?['"]|\.write_text\(|\.writelines?\("""
                           r"""|shutil\.(?:copy|move)|os\.replace\(""")
_PROJECT_PATH = re.compile(r"""['"](?:/[\w.-]+)*/?[\w.-]+/[\w./-]+\.\w{1,5}['"]""")  # a quoted nested file path
_LS_LONG = re.compile(r"^[-dlcbps][-rwxsStT@+.]{9}")


def is_tree(output: str) -> bool:
    """Whether a listing is Tao's own list_files tree: a `folder/` header, then entries indented two spaces a level."""
    lines = output.splitlines()[:2]
    return len(lines) == 2 and lines[0].endswith("/") and " " not in lines[0] and lines[1].startswith("  ")


def tree_entries(output: str, limit: int = 2000) -> list[str]:
    """The entries of Tao's list_files tree as paths from the workspace root (folders without their slash)."""
    lines = output.splitlines()[:limit]
    top = lines[0].strip().rstrip("/") if lines else ""
    base = "" if top in ("", ".") else top
    parents: list[str] = []  # the folder names above the current entry, one a level
    entries: list[str] = []
    for line in lines[1:]:
        name = line.lstrip(" ")
        level = (len(line) - len(name)) // 2
        if level < 1 or not name or name.startswith("["):  # the note of a cut-short listing, an unreadable folder
            continue
        name = name.split(" -> ", 1)[0]
        folder = name.endswith("/")
        name = name.rstrip("/")
        del parents[level - 1:]
        entries.append(posixpath.join(base, *parents, name))
        if folder:
            parents.append(name)
    return entries


def listing_entries(output: str, folder: str, limit: int = 2000) -> list[str]:
    """The entries a directory listing shows (`ls`, `ls -l`, `ls -F`, `ls -R` with its `dir:` headers), joined
    to the folder they are in."""
    entries: list[str] = []
    for line in output.splitlines()[:limit]:
        line = line.strip()
        if line.endswith(":") and " " not in line:  # ls -R: the entries below are in this folder
            folder = norm_path(line[:-1])
            continue
        if not line or line.startswith("total "):
            continue
        words = line.split()[-1:] if _LS_LONG.match(line) else line.split()
        for word in words:
            word = word.rstrip("/*@=|")
            if word and word not in (".", "..") and not word.startswith("-"):
                entries.append(posixpath.join(folder, word) if folder else word)
    return entries


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


def written_paths(action: Action, command: str | None = None) -> list[str]:
    """Files an action writes: write_file's path, or the `> file` targets of a shell write (read from the
    command as typed when given: the canonical spelling moves here-document bodies to the end)."""
    if action.tool == "write_file":
        return [action.args["path"]] if action.args.get("path") else []
    if action.tool != "bash" or action.kind not in (WRITE, WRITE_RUN):
        return []
    try:
        commands = shellwords.parse(command if command is not None else str(action.args.get("command", "")))
    except shellwords.ShellSyntax:
        return []
    return [r.target for c in commands for r in c.redirects
            if r.op in (">", ">>") and r.target and not r.target.startswith("/dev/")]


def file_in_hand(action: Action) -> str | None:
    """The one file an action reads, views, searches or edits (`sed -i ... f.py` too), None if none."""
    path = action.path
    if path is None and action.tool == "bash" and action.kind in (EDIT, VIEW, SEARCH, READ):
        words = str(action.args.get("command", "")).split()
        path = words[-1].strip("'\"") if words else None
    if path and "." in posixpath.basename(path) and not path.startswith(("-", "/dev/")) and "*" not in path:
        return path
    return None


def derivable(action: Action, path: str) -> bool:
    """Whether a whole read of `path` answers `action`: a read or range view of it, or a grep in it alone."""
    return action.path == path and (action.kind in (READ, VIEW) or action.tool == "grep")


def made_dirs(command: str, root: str = "") -> list[str]:
    """The folders a command makes with `mkdir` (the first level of `mkdir -p a/b`)."""
    try:
        commands = shellwords.parse(command)
    except shellwords.ShellSyntax:
        return []
    found = []
    for item in commands:
        argv = item.argv
        if argv[:1] == ["mkdir"]:
            found += [norm_path(word, root) for word in argv[1:] if not word.startswith("-")]
    return [path for path in found if path and not path.startswith("/")]


def removed_paths(action: Action) -> list[str]:
    """The files an `rm` command names."""
    command = str(action.args.get("command", ""))
    return [w for w in command.split()[1:] if not w.startswith("-")]


# Options whose value is the next word: pytest's (`-k expr`), and other runners' test-name filters (`go test -run X`).
_VALUE_FLAGS = frozenset({"-p", "-k", "-m", "-W", "-o", "-c", "-n", "--rootdir", "--ignore", "--deselect",
                          "-run", "-t", "--testNamePattern", "-e", "--example"})


def split_test(command: str) -> tuple[str, str | None]:
    """A test command's runner and target: `python tests/runtests.py a.b` -> (`python tests/runtests.py`, `a.b`).

    A compound command whose first part runs no tests (`cd tests && pytest x`) has no runner to reuse.
    """
    try:
        commands = shellwords.parse(command)
    except shellwords.ShellSyntax:
        commands = []
    if len(commands) > 1 and command_kind(commands[0]) != TEST:
        return command, None
    words = command.split()
    start = runner_length(words)  # `go test`, `npx jest`, `npm test --`: the words that name another runner
    if start and file_language(words) is None:
        return command, None  # `cargo test x` filters by name, `make test` names a goal: no file targets
    for index, word in enumerate(words[1:], 1):
        if index < start or (words[index - 1] in _VALUE_FLAGS and index > 1):
            continue  # `-p no:cacheprovider`, `-k expr`: the option's value, not a target
        if word.startswith("-") or (not start and (word in ("pytest", "unittest") or "runtests" in word
                                                   or word.endswith("bin/test"))):
            continue
        if posixpath.basename(word).startswith("python") or "=" in word:
            continue
        return " ".join(words[:index]), word
    return command, None


_CONTAINERS = frozenset({"src", "lib", "source", "python", "packages"})  # folders that hold the package
_TASK_WORD = re.compile(r"[a-z][a-z0-9]{3,}(?:_[a-z0-9]+)*")
_PART = re.compile(r"[a-z][a-z0-9]{2,}")
_GENERIC = frozenset({"test", "tests", "testing", "src", "lib", "init", "main", "py", "pyi", "txt", "rst", "the",
                      "and", "for", "with", "this", "that", "from"})


def name_parts(path: str) -> set[str]:
    """The distinctive lower-case parts of a path's last two parts (`tests/test_domain_std.py` -> {domain, std})."""
    tail = "/".join(path.lower().rsplit("/", 2)[-2:])
    return {part for part in _PART.findall(tail.replace("_", " ")) if part not in _GENERIC}


def _in_tests(path: str) -> bool:
    """A test module, or a folder inside a test folder (`tests/delete`, `pkg/tests`)."""
    if "." in posixpath.basename(path):
        return is_test_file(path)
    parts = path.split("/")
    return len(parts) > 1 and any(part.startswith("test") for part in parts[:-1]) or parts[-1] == "tests"



