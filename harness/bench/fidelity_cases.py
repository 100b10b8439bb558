"""What a fidelity case is, and the parts the generators (fidelity_kinds) build cases from.

A case is a tree, earlier real calls, one speculated call and the model's real call. Paths in the tree are
relative to the case root, which holds `ws/` (the workspace), `out/` (files outside it that links of the
tree point to) and `home/` (the scratch $HOME). Strings may hold placeholders that the runner fills in:
%WS%, %WSREL% (the workspace path without its leading slash), %OUT%, %HOME%, %TMP% (a prefix of canary
files in the real /tmp), %TOKEN% (that prefix's name), %STATE% (the overlay state base), %PORT% (a
loopback server the bench runs), %MARK% (what a hostile command prints when a forbidden step worked).
"""

from __future__ import annotations

import json
import random
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "value", "total", "parse", "render", "config")
ESCAPE_MARK = "TAO-ESCAPED"  # printed by a hostile command only when a forbidden step succeeded


@dataclass(frozen=True)
class Entry:
    """One path of a case's tree: a file (text in `data`), dir, symlink (target) or hardlink (of `data`)."""

    path: str
    type: str
    data: str = ""
    mode: int = 0o644


@dataclass(frozen=True)
class Call:
    """A tool call as the model's parser hands it over: a name and a JSON object of arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Outside:
    """A change made behind Tao's back between two calls: `data` appended in place to a case-root path."""

    path: str
    data: str


Step = Call | Outside


@dataclass(frozen=True)
class Case:
    """Everything one fidelity case needs; `expect` is a regex for a knowingly nondeterministic real call."""

    id: str
    kind: str
    label: str
    tree: tuple[Entry, ...]
    history: tuple[Step, ...]
    candidate: Call
    real: Call
    wait: bool = True
    expect: str | None = None
    late: int = 0  # the last `late` steps of the history (outside edits) come after the speculation has run

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (the --keep files, the examples of a report)."""
        step = lambda s: {"outside": s.path, "data": s.data} if isinstance(s, Outside) else call_dict(s)  # noqa: E731
        return {"id": self.id, "kind": self.kind, "label": self.label, "wait": self.wait, "expect": self.expect,
                "late": self.late,
                "tree": [[e.path, e.type, e.data, oct(e.mode)] for e in self.tree],
                "history": [step(s) for s in self.history], "candidate": call_dict(self.candidate),
                "real": call_dict(self.real)}


def call_dict(call: Call) -> dict[str, Any]:
    """A call as `{"name", "arguments"}`."""
    return {"name": call.name, "arguments": call.arguments}


def json_call(name: str, arguments: dict[str, Any]) -> Call:
    """A call as the model's JSON would carry it (tuples become lists; NaN, inf and huge ints survive)."""
    return Call(name, json.loads(json.dumps(arguments)))


# -- trees ------------------------------------------------------------------------------------------


@dataclass
class Tree:
    """A case tree being built, with what the generators pick calls from (workspace-relative paths)."""

    entries: list[Entry] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=lambda: ["."])
    links: list[str] = field(default_factory=list)
    expected: int = 0

    def add(self, path: str, kind: str, data: str = "", mode: int = 0o644) -> None:
        """Add an entry; workspace paths are remembered for later calls."""
        self.entries.append(Entry(path, kind, data, mode))
        if path.startswith("ws/"):
            rel = path[3:]
            if kind == "file":
                self.files[rel] = data
            elif kind == "dir":
                self.dirs.append(rel)
            else:
                self.links.append(rel)

    def text_files(self) -> list[str]:
        """Workspace files with text in them, sorted."""
        return sorted(p for p, text in self.files.items() if text and "\0" not in text)

    def py_files(self) -> list[str]:
        """Workspace Python files, sorted."""
        return sorted(p for p in self.files if p.endswith(".py"))


def module(rng: random.Random, tag: str, expected: int | None = None) -> str:
    """A small Python module with a few functions (unique by `tag`)."""
    lines = [f'"""Module {tag}."""', ""]
    if expected is not None:
        lines += [f"EXPECTED = {expected}", ""]
    for i in range(rng.randint(1, 4)):
        word = rng.choice(WORDS)
        lines += [f"def {word}_{i}(n):", f"    return n + {rng.randint(0, 99)}  # {tag}", "", ""]
    if rng.random() < 0.5:
        lines += [f"class {rng.choice(WORDS).title()}:", "    def run(self):", f"        return {tag!r}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def text_lines(rng: random.Random, low: int = 1, high: int = 30) -> str:
    """Numbered lines of words and numbers (a data file)."""
    return "".join(f"{i + 1} {rng.choice(WORDS)} {rng.randint(0, 999)}\n" for i in range(rng.randint(low, high)))


TEST_A = """import sys
sys.path.insert(0, ".")
import a
ok = a.EXPECTED == {value}
print("PASS" if ok else "FAIL: EXPECTED is " + str(a.EXPECTED))
sys.exit(0 if ok else 1)
"""


def project(rng: random.Random) -> Tree:
    """A small plain-directory project (no git) plus `out/` and `home/` beside it."""
    tree = Tree()
    for folder in ("ws", "out", "home", "home/.cache", "ws/pkg", "ws/tests", "ws/other", "ws/other/deep"):
        tree.add(folder, "dir", mode=0o755)
    tree.expected = rng.randint(0, 99)
    tree.add("ws/a.py", "file", module(rng, "a", tree.expected), rng.choice((0o644, 0o644, 0o755, 0o600)))
    tree.add("ws/x.py", "file", module(rng, "x"))
    tree.add("ws/other/x.py", "file", module(rng, "other.x"))
    tree.add("ws/pkg/__init__.py", "file", "")
    tree.add("ws/pkg/mod.py", "file", module(rng, "pkg.mod"))
    tree.add("ws/data.txt", "file", text_lines(rng))
    tree.add("ws/README.md", "file", f"# Demo {rng.randint(0, 999)}\n\nSee a.py.\n")
    value = tree.expected if rng.random() < 0.6 else tree.expected + 1
    tree.add("ws/tests/test_a.py", "file", TEST_A.format(value=value))
    tree.add("out/secret.txt", "file", "secret\n", 0o600)
    tree.add("out/shared.txt", "file", text_lines(rng, 1, 5))
    for path, text, chance in (("ws/big.txt", text_lines(rng, 2100, 2600), 0.2),  # past the line and output caps
                               ("ws/blob.bin", "\0\1\2 binary\n", 0.3), ("ws/crlf.txt", "one\r\ntwo\r\n", 0.3),
                               ("ws/latin1.txt", "caf\udce9 alpha\nna\udcefve\n", 0.3),  # not UTF-8
                               ("ws/long.txt", "beta " * 900 + "\n", 0.2), ("ws/empty.txt", "", 0.3)):
        if rng.random() < chance:
            tree.add(path, "file", text)
    return tree


# -- calls --------------------------------------------------------------------------------------------


def q(path: str) -> str:
    """A path quoted for the shell."""
    return shlex.quote(path)


def test_command(rng: random.Random, tree: Tree) -> str:
    """A deterministic shell command of the kind a test run is: reads, writes, passes or fails."""
    f = q(rng.choice(tree.text_files()))
    w, n = rng.choice(WORDS), rng.randint(0, 99)
    return rng.choice((
        f"cat {f}", f"wc -l {f}", f"head -n 3 {f}", f"grep -c {w} {f}", "python3 tests/test_a.py",
        f"echo {w} > gen_{n}.txt && cat gen_{n}.txt", f"printf '%s\\n' {w} >> {f} && tail -n 2 {f}",
        f"sed -i 's/{w}/{rng.choice(WORDS)}/g' {f} && cat {f}", f"rm -f {f} && ls", "find . | sort",
        f"mkdir -p build/{w} && echo ok > build/{w}/out.txt && find build | sort",
        f"chmod {rng.choice(('600', '755', '444'))} {f} && stat -c '%a %s' {f}", f"mv {f} {f}.bak && ls",
        f"ln -s {f} link_{n} && readlink link_{n}", f"exit {rng.randint(1, 3)}", f"echo {w}; exit 1", "true",
        "ls -1 pkg", f"chown 1234:1234 {f} && stat -c '%u:%g' {f}", f"ln {f} hard_{n} && stat -c %h {f}",
        f"mkfifo pipe_{n} && ls", "rm -rf other && ls", f"cat {f} {f} | sort | uniq -c",
        "seq 1 20000", f"echo out; cat {f} >&2; echo out2", "kill -TERM $$", "python3 -c 'print(\"x\" * 40000)'",
        "python3 -c 'import os; os.setuid(4321)'", "stat -c '%U:%G' / /etc/passwd && id -u", "ls -ln / | head -3",
    ))


def pure_call(rng: random.Random, tree: Tree) -> tuple[str, Call]:
    """A valid call of a pure tool over the tree, and its label."""
    texts, pys = tree.text_files(), tree.py_files()
    pick = rng.randrange(5)
    if pick == 0 or not texts:
        return "list", json_call("list_files", {k: v for k, v in (("path", rng.choice(tree.dirs)),
                                                                   ("depth", rng.randint(1, 3))) if rng.random() < 0.6})
    if pick == 1:
        args: dict[str, Any] = {"pattern": rng.choice((*WORDS, r"def \w+", r"return n \+ \d+", "EXPECTED"))}
        if rng.random() < 0.4:
            args["path"] = rng.choice(tree.dirs + texts)
        if rng.random() < 0.3:
            args["glob"] = rng.choice(("*.py", "*.txt", "!tests/**"))
        return "grep", json_call("grep", args)
    if pick == 2 and pys:
        return "outline", json_call("outline", {"path": rng.choice(pys)})
    path = rng.choice(texts)
    if pick == 3:
        total = tree.files[path].count("\n") or 1
        start = rng.randint(1, total)
        return "read-range", json_call("read_file", {"path": path, "start_line": start,
                                                     "end_line": rng.randint(start, total + 2)})
    return "read-whole", json_call("read_file", {"path": path})


def history(rng: random.Random, tree: Tree, size: int | None = None) -> list[Step]:
    """A few earlier real calls: reads, test runs, edits, shell commands, and now and then an outside edit."""
    steps: list[Step] = []
    for i in range(rng.randint(0, 3) if size is None else size):
        pick = rng.randrange(6)
        if pick == 0:
            steps.append(pure_call(rng, tree)[1])
        elif pick == 1:
            steps.append(json_call("run_tests", {"command": test_command(rng, tree)}))
        elif pick == 2:
            new = tree.expected + rng.choice((0, 1))
            steps.append(json_call("edit_file", {"path": "a.py", "old": f"EXPECTED = {tree.expected}",
                                                 "new": f"EXPECTED = {new}"}))
        elif pick == 3:
            steps.append(json_call("write_file", {"path": f"new_{i}.txt", "content": text_lines(rng, 1, 4)}))
        elif pick == 4:
            steps.append(json_call("bash", {"command": rng.choice(("echo note >> notes.txt", "mkdir -p build",
                                                                    "cp x.py y.py", "rm -f README.md", "cd pkg"))}))
        else:
            steps.append(Outside("out/shared.txt", f"outside edit {i}\n"))
    return steps


def with_repeat(rng: random.Random, steps: list[Step], call: Call, chance: float = 0.25) -> tuple[Step, ...]:
    """The history, with the same call inserted at a random place now and then (the repeat cache answers)."""
    if rng.random() < chance:
        steps.insert(rng.randint(0, len(steps)), call)
    return tuple(steps)


def case(cid: str, kind: str, label: str, tree: Tree, steps: tuple[Step, ...] | list[Step], candidate: Call,
         real: Call | None = None, rng: random.Random | None = None, expect: str | None = None, late: int = 0) -> Case:
    """A case; the speculation is waited for before the real call most of the time."""
    wait = rng.random() < 0.85 if rng is not None else True
    return Case(cid, kind, label, tuple(tree.entries), tuple(steps), candidate, real or candidate, wait, expect,
                late)


def edited_late(rng: random.Random, tree: Tree, steps: tuple[Step, ...], call: Call) -> tuple[tuple[Step, ...], int]:
    """Now and then, an edit made behind Tao's back after the speculation ran: to the file the call reads."""
    path = call.arguments.get("path")
    if rng.random() > 0.15 or not isinstance(path, str) or path not in tree.files:
        return steps, 0
    return (*steps, Outside(f"ws/{path}", "# edited behind Tao's back\n")), 1


def run_output(command: str, body: str, code: int = 0) -> str:
    """The regex of a run_tests observation whose output is `body` (a regex)."""
    return re.escape(f"$ {command}\n") + body + re.escape(f"\n[exit code {code}]")
