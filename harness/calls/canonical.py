"""The canonical action form: one spelling per effect, so equal actions compare equal.

Structured Tao calls keep their tool and get normalised arguments (relative paths, no default values).
Bash commands are normalised (whitespace, quoting, paths under the session's working directory made
relative so that a call learned on one machine matches on another, `npm run test` as `npm test`) and,
where that is unambiguous, mapped to the
structured tool they amount to: `cat f` and `nl -ba f` are `read_file(path=f)`, `sed -n '5,9p' f` is
`read_file(f, 5, 9)`, `grep -rn pat dir` is `grep(pat, dir)`, `pytest tests/x.py` is `run_tests(...)`,
`cat <<'EOF' > f` is `write_file(f, ...)`. Every action also gets a `kind` (read, view, search, test,
script, write, ...) for control-flow patterns and an effect class that says where it may be speculated.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache
from typing import Any

from harness.calls import shellwords
from harness.calls.action import (EDIT, FINISH, GIT, INSTALL, LIST, OTHER, READ,
                                        SCRIPT, SEARCH, SHELL, TEST, VIEW, WRITE, WRITE_RUN, CLEANUP,
                                        TOOL_KINDS, Action, make, norm_path, read_action, to_int)
from harness.calls.runners import respell
from harness.calls.shellmap import command_kind, git_read, map_pipeline, map_simple, readonly, strip_assignments
from tools import TOOL_EFFECTS, Effect

__all__ = ["Action", "canonical", "canonical_bash", "make", "norm_path", "normalize_command", "read_action"]

# Kind priority when a compound command does several things: the first one present names it.
_PRIORITY = (TEST, SCRIPT, EDIT, WRITE, INSTALL, CLEANUP, SEARCH, VIEW, READ, LIST, GIT, SHELL)


def canonical(name: str, arguments: dict[str, Any], root: str = "") -> Action:
    """The canonical form of a call to tool `name` (a Tao tool or a foreign one)."""
    args = arguments if isinstance(arguments, dict) else {}
    if name == "bash":
        return canonical_bash(str(args.get("command", "")), root)
    if name == "read_file":
        return read_action(norm_path(args.get("path"), root), to_int(args.get("start_line")),
                           to_int(args.get("end_line")))
    if name == "grep":
        path = norm_path(args.get("path"), root) or None
        return make("grep", {"pattern": str(args.get("pattern", "")), "path": path,
                             "glob": args.get("glob") or None}, SEARCH)
    if name == "run_tests":
        command = args.get("command")
        if isinstance(command, str) or not command:
            command = normalize_command(command, root) if command else None
        return make("run_tests", {"command": command}, TEST)  # a command of another type keeps its own key
    if name == "finish":
        return make("finish", {}, FINISH)
    if name in TOOL_EFFECTS:  # list_files, outline, edit_file, write_file, and any tool added since
        clean = dict(args)
        clean["path"] = norm_path(clean.get("path"), root) or None  # no path: dropped (None) by make
        if name == "list_files" and clean.get("depth") is not None:
            clean["depth"] = to_int(clean["depth"])
        return make(name, clean, TOOL_KINDS.get(name) or foreign_kind(name))
    # Another agent's tool (Claude Code's Glob): a path under the working directory is relative, as in Tao's.
    foreign = {k: (norm_path(v, root) or None) if isinstance(v, str) and _under(v, root) else v
               for k, v in sorted(args.items())}
    return make(name, foreign, foreign_kind(name), Effect.UNKNOWN)


# Words in the names of other agents' tools, and the kind of call they make (SWE-agent's `edit`, `goto`,
# `find_file`; Claude Code's `Glob`, `MultiEdit`; `str_replace_based_edit_tool` ...). First match wins.
_NAME_KINDS = ((OTHER, ("todo", "task", "think", "plan", "web", "fetch", "notebook")),
               (EDIT, ("edit", "replace", "insert", "append", "patch", "apply")), (WRITE, ("create", "write")),
               (SEARCH, ("find", "search", "grep", "glob")), (VIEW, ("goto", "scroll")),
               (READ, ("open", "read", "view", "cat")), (LIST, ("ls", "list", "tree", "filemap", "dir")),
               (FINISH, ("submit", "finish", "done", "complete", "exit")), (TEST, ("test",)),
               (SHELL, ("bash", "shell", "run", "exec", "terminal", "command")))
_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def foreign_kind(name: str) -> str:
    """The kind of call a tool of another agent makes, guessed from the words of its name; `other` if none."""
    words = {w.lower() for w in _NAME_WORD.findall(name)}
    for kind, keys in _NAME_KINDS:
        if words & set(keys):
            return kind
    return OTHER


@lru_cache(maxsize=8192)
def canonical_bash(command: str, root: str = "") -> Action:
    """A bash command: a structured tool when it amounts to one, else normalised bash with its kind.

    Cached: actions are treated as immutable (callers copy `args` before changing anything)."""
    try:
        commands = shellwords.parse(command)
    except shellwords.ShellSyntax:
        return make("bash", {"command": _relative_text(" ".join(command.split()), root)}, _guess_kind(command),
                    Effect.MUTATING)
    commands = [_respelled(c, root) for c in _drop_root_cd(commands, root)]
    if not commands:
        return make("bash", {"command": ""}, SHELL, Effect.SANDBOXED)
    structured = _structured(commands, root)
    if structured is not None:
        return structured
    kinds = _kinds(commands)
    kind = WRITE_RUN if WRITE in kinds and (TEST in kinds or SCRIPT in kinds) else next(
        (k for k in _PRIORITY if k in kinds), SHELL)
    if _git_reads(commands):
        effect = Effect.PURE
    elif all(readonly(c) or command_kind(c) in (TEST, SCRIPT) for c in commands):
        effect = Effect.SANDBOXED
    else:
        effect = Effect.MUTATING
    return make("bash", {"command": shellwords.render(commands)}, kind, effect)


def normalize_command(command: str, root: str = "") -> str:
    """A shell command in canonical spelling (as written when this reader cannot follow it)."""
    try:
        return shellwords.render([_respelled(c, root) for c in _drop_root_cd(shellwords.parse(command), root)])
    except shellwords.ShellSyntax:
        return _relative_text(" ".join(command.split()), root)


def _relative_text(text: str, root: str) -> str:
    """A command this reader cannot follow with the working directory's paths relative all the same, as text:
    `/home/u/proj/src/a.go` is `src/a.go`, the directory itself `.`."""
    root = root.rstrip("/")
    if not root or root not in text:
        return text
    inside_or_itself = re.escape(root) + r"(?:(/)(?=[^\s/;&|)'\"])|/?(?![\w./-]))"  # `root/x`, or `root` alone
    return re.sub(inside_or_itself, lambda m: "" if m.group(1) else ".", text)


def _respelled(command: shellwords.Command, root: str) -> shellwords.Command:
    """A command with one spelling for what does not matter: paths under the session's working directory
    relative to it (`/home/u/proj/src/a.ts` is `src/a.ts`, the directory itself `.`; other absolute paths
    stay; a program run by its path is `./bin/x`, as typed when relative), and a package manager's test script
    as `npm test` (see runners.respell)."""
    words = [_relative_word(w, root) for w in command.words]
    argv = [w.value for w in words]
    skip = len(argv) - len(strip_assignments(command))
    if skip < len(words) and words[skip] is not command.words[skip] and not argv[skip].startswith("."):
        argv[skip] = f"./{argv[skip]}"
        words[skip] = shellwords.Word(argv[skip], argv[skip])
    spelled = argv[:skip] + respell(argv[skip:])
    if spelled != argv:  # `npm run test` or `npm t` as `npm test`; the words after it keep their own spelling
        dropped = len(argv) - len(spelled)
        words = [*words[:skip + 1], shellwords.Word("test", "test"), *words[skip + 2 + dropped:]]
    redirects = [shellwords.Redirect(r.op, norm_path(r.target, root) or ".")
                 if r.body is None and _under(r.target, root) else r for r in command.redirects]
    if words == command.words and redirects == command.redirects:
        return command
    return shellwords.Command(words, redirects, command.joiner)


def _under(path: str, root: str) -> bool:
    """Whether a path is the working directory or inside it (root given, absolute, not `/`)."""
    root = root.rstrip("/")
    if not root or not path.startswith(root):
        return False
    path = posixpath.normpath(path)
    return path == root or path.startswith(root + "/")


def _relative_word(word: shellwords.Word, root: str) -> shellwords.Word:
    """A word naming a path under the working directory, relative to it (`--out=/root/x` too)."""
    if word.expands or not root:
        return word
    head, eq, tail = word.value.partition("=") if word.value.startswith("-") else ("", "", word.value)
    if not _under(tail, root):
        return word
    value = head + eq + (norm_path(tail, root) or ".")
    return shellwords.Word(value, value)


def _git_reads(commands: list[shellwords.Command]) -> bool:
    """Git reads (`git status`, `git diff`, `git log -n 5 | head`): pure, as they read the repository only.

    Each command is a git read, or a read-only filter of the one before it (after a `|`)."""
    for index, command in enumerate(commands):
        piped = index > 0 and commands[index - 1].joiner == "|"
        argv = strip_assignments(command)
        if not (argv and posixpath.basename(argv[0]) == "git" and git_read(argv) and readonly(command)) and not (
                piped and readonly(command)):
            return False
    return bool(commands)


def _structured(commands: list[shellwords.Command], root: str) -> Action | None:
    if len(commands) == 1:
        return map_simple(commands[0], root)
    if len(commands) == 2 and commands[0].joiner == "|":
        return map_pipeline(commands[0], commands[1], root)
    return None


def _kinds(commands: list[shellwords.Command]) -> set[str]:
    kinds = set()
    for index, command in enumerate(commands):
        piped = index > 0 and commands[index - 1].joiner == "|"
        kind = command_kind(command)
        if kind and not (piped and kind in (VIEW, SEARCH, READ, LIST)):
            kinds.add(kind)
    return kinds


def _drop_root_cd(commands: list[shellwords.Command], root: str) -> list[shellwords.Command]:
    """`cd <root> && x` is `x` for an agent whose commands already run at the root."""
    if (root and len(commands) > 1 and commands[0].argv[:1] == ["cd"] and len(commands[0].argv) == 2
            and commands[0].joiner == "&&" and norm_path(commands[0].argv[1], root) == ""
            and commands[0].argv[1].startswith("/")):
        return commands[1:]
    return commands


def _guess_kind(command: str) -> str:
    """The kind of a command this reader cannot parse, from its first word."""
    first = command.split(maxsplit=1)[0] if command.split() else ""
    try:
        return command_kind(shellwords.Command([shellwords.Word(first, first)])) or SHELL
    except Exception:  # a guess only
        return SHELL
