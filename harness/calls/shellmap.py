"""What one shell command amounts to: a structured Tao call when unambiguous, else a kind.

`map_simple` and `map_pipeline` return an `Action` for the commands that are really a file read
(`cat`, `nl -ba`, `sed -n 'a,bp'`, `head`), a search (`grep` with flags that only change the output
format), a directory listing (`ls`), a test or build run (`pytest ...`, `go test ./...`, `npm test`: see
`runners`) or a file write (a here-document into a file); None otherwise. `command_kind` names what any
command does, `readonly` says whether it leaves the workspace as it was, and `git_read` whether a git
command only reads the repository.
"""

from __future__ import annotations

import posixpath
import re

from harness.calls.action import (CLEANUP, EDIT, GIT, INSTALL, LIST, READ, SCRIPT, SEARCH, SHELL, TEST,
                                        VIEW, WRITE, Action, make, norm_path, read_action)
from harness.calls.runners import is_test_run
from harness.calls.shellwords import Command, Redirect

_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+|\$))?p$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HARMLESS_REDIRECTS = {"2>/dev/null", ">/dev/null", "2>&1", ">&2", "1>&2", "&>/dev/null"}
_NEUTRAL = {"cd", "export", "pwd", "true", "false", "sleep", "set", "source", ".", "which", "type", "clear",
            "unset", "env", "echo", "printf", "exit"}
_READONLY = {"cat", "nl", "head", "tail", "sed", "grep", "egrep", "fgrep", "rg", "ls", "find", "wc", "sort",
             "uniq", "cut", "tr", "diff", "git", "echo", "printf", "pwd", "which", "type", "file", "stat",
             "tree", "cd", "export", "true", "false", "sleep", "du", "df", "basename", "dirname", "xargs",
             "column", "od", "xxd", "md5sum", "realpath", "readlink", "jq", "less", "more", "cmp", "test", "["}
_GIT_READONLY = {"diff", "status", "log", "show", "blame", "grep", "ls-files", "rev-parse", "branch",
                 "describe", "shortlog", "ls-tree", "cat-file", "rev-list", "reflog", "stash", "tag"}
_GIT_LISTINGS = {"branch", "tag", "reflog", "stash"}  # read only when they list (`git stash list`, bare `git tag`)
_GIT_VALUE_OPTIONS = {"-C", "-c", "--git-dir", "--work-tree"}  # git's own options that take the next word
_LINT_TOOLS = {"pylint", "flake8", "mypy", "black", "ruff", "sphinx-build", "make", "pyright", "isort"}
_INSTALLERS = {"pip", "pip3", "conda", "apt", "apt-get", "uv", "poetry", "npm", "yarn"}
_EDITORS = {"patch", "ed", "ex"}
_GREP_FLAGS = set("nrRHIsEFiw")
_LS_FLAGS = set("laAFhp1tsSrGgoC")


def strip_assignments(command: Command) -> list[str]:
    """argv without leading `VAR=value` words."""
    argv = command.argv
    index = 0
    while index < len(argv) and _ASSIGN.match(argv[index]) and not command.words[index].raw.startswith(("'", '"')):
        index += 1
    return argv[index:]


def map_simple(command: Command, root: str) -> Action | None:
    """The structured call one simple command amounts to, or None."""
    argv = command.argv
    if not argv or strip_assignments(command) != argv:
        return None
    name = argv[0]
    if name in ("cat", "tee") and _is_heredoc_write(command, name):
        return _write(command, root)
    if not all(_render_redirect(r) in _HARMLESS_REDIRECTS for r in command.redirects):
        return None
    if any(word.expands for word in command.words[1:]) and name != "grep":
        return None
    if name == "cat" and len(argv) >= 2 and set(argv[1:-1]) <= {"-n"} and not argv[-1].startswith("-"):
        return read_action(norm_path(argv[-1], root))
    if name == "nl":
        path = _nl_file(argv)
        return read_action(norm_path(path, root)) if path else None
    if name == "sed":
        return _sed_view(argv, root)
    if name == "head":
        lines, rest = _head_lines(argv[1:])
        return read_action(norm_path(rest[0], root), 1, lines) if lines and len(rest) == 1 else None
    if name == "grep":
        return _grep(command, root)
    if name == "ls":
        return _ls(argv, root)
    if command_kind(command) == TEST:
        return make("run_tests", {"command": _render(command)}, TEST)
    return None


def map_pipeline(first: Command, second: Command, root: str) -> Action | None:
    """`nl -ba f | sed -n 'a,bp'`, `cat -n f | head -n N` and the like, as read_file; else None."""
    if first.redirects or second.redirects or any(w.expands for w in first.words + second.words):
        return None
    argv = first.argv
    if argv[:1] == ["nl"]:
        path = _nl_file(argv)
    elif argv[:1] == ["cat"] and len(argv) >= 2 and set(argv[1:-1]) <= {"-n"}:
        path = argv[-1]
    else:
        return None
    if not path or path.startswith("-"):
        return None
    tail = second.argv
    if tail[:1] == ["sed"] and len(tail) in (3, 4) and tail[1] == "-n":
        script = tail[-1] if len(tail) == 3 or tail[2] == "-e" else ""
        span = _sed_span(script)
        return read_action(norm_path(path, root), *span) if span else None
    if tail[:1] == ["head"]:
        lines, rest = _head_lines(tail[1:])
        return read_action(norm_path(path, root), 1, lines) if lines and not rest else None
    return None


def command_kind(command: Command) -> str | None:
    """What a simple command does (a kind), or None for commands that only set up (cd, echo, export)."""
    argv = strip_assignments(command)
    if not argv:
        return None
    name = posixpath.basename(argv[0])
    writes = any(r.op in (">", ">>", ">|", "&>") and r.target not in ("/dev/null", "") for r in command.redirects)
    if name in ("cat", "echo", "printf", "tee") and (writes or (name == "tee" and len(argv) > 1)):
        return WRITE
    if name in _NEUTRAL:
        return None
    if is_test_run(argv):
        return TEST
    if name in ("go", "cargo") and argv[1:2] == ["run"]:  # a program run from its source, as `python x.py`
        return SCRIPT
    simple = _SIMPLE_KINDS.get(name)
    if simple:
        return simple
    if name == "sed":
        return EDIT if any(a.startswith(("-i", "--in-place")) for a in argv[1:]) else VIEW
    if name == "perl":
        return EDIT if any(a.startswith("-i") or a.startswith("-pi") for a in argv[1:]) else SCRIPT
    if name == "find":
        return SEARCH if any(a in ("-name", "-iname", "-path", "-regex") for a in argv) else LIST
    if name == "xargs":
        rest = [a for a in argv[1:] if not a.startswith("-")]
        return command_kind(Command(command.words[len(command.words) - len(rest):])) if rest else None
    if name.startswith("python") or name in ("bash", "sh", "node", "ruby") or name in _LINT_TOOLS:
        return INSTALL if argv[1:3] == ["-m", "pip"] else SCRIPT
    if argv[0].startswith("./") or argv[0].endswith((".py", ".sh")):
        return SCRIPT
    return SHELL


_SIMPLE_KINDS = {"cat": READ, "nl": VIEW, "head": VIEW, "tail": VIEW, "less": VIEW, "more": VIEW, "wc": VIEW,
                 "grep": SEARCH, "egrep": SEARCH, "fgrep": SEARCH, "rg": SEARCH, "ag": SEARCH, "ack": SEARCH,
                 "ls": LIST, "tree": LIST, "du": LIST, "git": GIT, "rm": CLEANUP, "rmdir": CLEANUP,
                 **{name: INSTALL for name in _INSTALLERS}, **{name: EDIT for name in _EDITORS}}


def readonly(command: Command) -> bool:
    """Whether a simple command leaves the workspace as it was (reads, searches, listings, git views)."""
    argv = strip_assignments(command)
    if not argv:
        return True
    if not all(_render_redirect(r) in _HARMLESS_REDIRECTS or r.body is not None for r in command.redirects):
        return False
    name = posixpath.basename(argv[0])
    if name not in _READONLY:
        return False
    if name == "sed":
        return not any(a.startswith(("-i", "--in-place")) for a in argv[1:])
    if name == "find":
        return not any(a in ("-delete", "-exec", "-execdir", "-fprint", "-ok") for a in argv)
    if name == "git":
        return git_read(argv)
    if name in ("sort", "uniq"):
        return not any(a.startswith(("-o", "--output")) for a in argv) and len(
            [a for a in argv[1:] if not a.startswith("-")]) <= 1
    if name == "xargs":
        rest = [a for a in argv[1:] if not a.startswith("-")]
        return bool(rest) and posixpath.basename(rest[0]) in _READONLY - {"xargs", "sed", "find", "git"}
    return True


def git_read(argv: list[str]) -> bool:
    """Whether a git command only reads the repository (`git status`, `git diff f`, `git log -n 5`, `git show`),
    its own options (`--no-pager`, `-C dir`) allowed; `--output` (a file written) or a listing command given
    arguments (`git branch new`, `git stash pop`) is not a read."""
    index = 1
    while index < len(argv) and argv[index].startswith("-"):
        index += 2 if argv[index] in _GIT_VALUE_OPTIONS else 1
    if index >= len(argv) or argv[index] not in _GIT_READONLY:
        return False
    sub, rest = argv[index], argv[index + 1:]
    if any(a.startswith(("--output", "-o")) and sub != "grep" for a in rest):
        return False
    if sub in _GIT_LISTINGS:
        if sub in ("stash", "reflog") and rest:
            return rest[0] in ("list", "show")
        listing = all(a.startswith("-") for a in rest) and not {"-d", "-D", "-m", "-M", "-f"} & set(rest)
        return sub != "stash" and listing
    return True


def _is_heredoc_write(command: Command, name: str) -> bool:
    bodies = [r for r in command.redirects if r.body is not None]
    outs = [r for r in command.redirects if r.body is None]
    if len(bodies) != 1:
        return False
    if name == "cat":
        return command.argv == ["cat"] and len(outs) == 1 and outs[0].op == ">"
    return len(command.argv) == 2 and not outs and not command.words[1].expands


def _write(command: Command, root: str) -> Action | None:
    body = next(r for r in command.redirects if r.body is not None)
    literal = body.quoted or not any(c in (body.body or "") for c in "$`\\")
    target = command.argv[1] if command.argv[0] == "tee" else next(r.target for r in command.redirects
                                                                   if r.body is None)
    if not literal or "$" in target or "`" in target:
        return None
    return make("write_file", {"path": norm_path(target, root), "content": body.body}, WRITE)


def _render_redirect(redirect: Redirect) -> str:
    return f"{redirect.op}{redirect.target}"


def _render(command: Command) -> str:
    return " ".join(word.render() for word in command.words)


def _nl_file(argv: list[str]) -> str | None:
    args, index = argv[1:], 0
    while index < len(args) - 1:
        if args[index] in ("-ba", "-b") or args[index].startswith(("-w", "-n", "-s")):
            step = 2 if args[index] in ("-b",) or args[index] in ("-w", "-n", "-s") else 1
            index += step
        else:
            return None
    return args[-1] if index == len(args) - 1 and not args[-1].startswith("-") else None


def _sed_span(script: str) -> tuple[int, int | None] | None:
    match = _SED_RANGE.match(script.strip())
    if not match:
        return None
    start = int(match.group(1))
    end = match.group(2)
    if end == "$":
        return start, None
    return start, int(end) if end else start


def _sed_view(argv: list[str], root: str) -> Action | None:
    args = argv[1:]
    if len(args) == 3 and args[0] == "-n":
        script, path = args[1], args[2]
    elif len(args) == 4 and args[0] == "-n" and args[1] == "-e":
        script, path = args[2], args[3]
    else:
        return None
    span = _sed_span(script)
    if not span or path.startswith("-"):
        return None
    return read_action(norm_path(path, root), *span)


def _head_lines(args: list[str]) -> tuple[int | None, list[str]]:
    lines: int | None = 10
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "-n" and index + 1 < len(args):
            lines, index = _positive(args[index + 1]), index + 2
            continue
        if re.fullmatch(r"-n?\d+", arg) or arg.startswith("--lines="):
            lines = _positive(re.sub(r"^(-n?|--lines=)", "", arg))
        elif arg.startswith("-"):
            return None, rest
        else:
            rest.append(arg)
        index += 1
    return lines, rest


def _positive(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) > 0 else None


def _grep(command: Command, root: str) -> Action | None:
    words, pattern, glob, paths = command.words[1:], None, None, []
    flags: set[str] = set()
    index = 0
    while index < len(words):
        word = words[index]
        value = word.value
        if value == "-e" and index + 1 < len(words) and pattern is None:
            pattern, index = words[index + 1].value, index + 2
            continue
        if value.startswith("--include") and glob is None:
            glob = value.split("=", 1)[1] if "=" in value else (words[index + 1].value if index + 1 < len(words)
                                                                else "")
            index += 1 if "=" in value else 2
            continue
        if value in ("--line-number", "--recursive", "--color=never", "--with-filename"):
            flags.add({"--recursive": "r"}.get(value, "n"))
        elif value.startswith("--"):
            return None
        elif value.startswith("-") and len(value) > 1:
            if not set(value[1:]) <= _GREP_FLAGS:
                return None
            flags |= set(value[1:])
        elif word.expands or "$" in word.raw or "`" in word.raw:
            return None
        elif pattern is None:
            pattern = value
        else:
            paths.append(value)
        index += 1
    if pattern is None or len(paths) > 1 or (not paths and not flags & {"r", "R"}) or glob == "":
        return None
    path = norm_path(paths[0], root) if paths else None
    return make("grep", {"pattern": _grep_regex(pattern, flags), "path": path or None, "glob": glob}, SEARCH)


def _grep_regex(pattern: str, flags: set[str]) -> str:
    """grep's pattern (basic, -E or -F; -i, -w) as one extended regular expression."""
    if "F" in flags:
        regex = re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", pattern)
    elif "E" in flags:
        regex = pattern
    else:
        regex = _bre_to_ere(pattern)
    if "w" in flags:
        regex = rf"\b(?:{regex})\b"
    return f"(?i){regex}" if "i" in flags else regex


def _bre_to_ere(pattern: str) -> str:
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            nxt = pattern[index + 1]
            out.append(nxt if nxt in "|(){}+?" else char + nxt)
            index += 2
            continue
        out.append("\\" + char if char in "|(){}+?" else char)
        index += 1
    return "".join(out)


def _ls(argv: list[str], root: str) -> Action | None:
    paths = [a for a in argv[1:] if not a.startswith("-")]
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-") and not a.startswith("--"))
    longs = [a for a in argv[1:] if a.startswith("--")]
    if len(paths) > 1 or not set(flags) <= _LS_FLAGS or any(a != "--color=never" for a in longs):
        return None
    return make("list_files", {"path": norm_path(paths[0], root) or None if paths else None, "depth": 1}, LIST)

