"""A small POSIX-shell reader: enough of bash to recognise what a one-line agent command does.

`parse(command)` splits a command into simple commands joined by operators (`&&`, `||`, `;`, `|`),
each with its words, redirections and here-document. Words remember whether the shell would expand
them (`$`, backticks, unquoted globs), so a caller can tell a literal `'a b'` from `"$HOME"`.
Anything this reader cannot follow raises `ShellSyntax`; callers then treat the command as opaque.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

_OPERATORS = ("&&", "||", ";;", "|&", ";", "|", "&", "\n")
_GLOB = set("*?[")


class ShellSyntax(ValueError):
    """A command this reader cannot follow (unbalanced quotes, subshells, unknown constructs)."""


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal; `expands` when the shell would still rewrite it."""

    value: str
    raw: str
    expands: bool = False

    def render(self) -> str:
        """The word in one canonical spelling: quoted by shlex when literal, as written otherwise."""
        return self.raw if self.expands else shlex.quote(self.value)


@dataclass(frozen=True)
class Redirect:
    """A redirection such as `> out.txt`, `2>&1` or `<<'EOF'` (with its here-document body)."""

    op: str
    target: str
    body: str | None = None
    quoted: bool = False


@dataclass
class Command:
    """A simple command: words, redirections, and the operator that joins it to the next one."""

    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    joiner: str = ""

    @property
    def argv(self) -> list[str]:
        """The words after quote removal."""
        return [word.value for word in self.words]

    @property
    def name(self) -> str:
        """The command word."""
        return self.words[0].value if self.words else ""

    def render(self) -> str:
        """The command in canonical spelling."""
        parts = [word.render() for word in self.words]
        for redirect in self.redirects:
            if redirect.body is not None:
                parts.append(f"<<'{redirect.target}'" if redirect.quoted else f"<<{redirect.target}")
            else:
                parts.append(f"{redirect.op}{shlex.quote(redirect.target) if redirect.target else ''}")
        return " ".join(parts)


def parse(command: str) -> list[Command]:
    """Commands of `command` in order; raises ShellSyntax for what this reader does not follow."""
    return _Reader(command).read()


def render(commands: list[Command]) -> str:
    """One canonical spelling: single spaces, shlex quoting of literal words, here-documents last."""
    text = ""
    for command in commands:
        text += command.render()
        if command.joiner:
            text += " ; " if command.joiner == "\n" else f" {command.joiner} "
    bodies = [r.body for c in commands for r in c.redirects if r.body is not None]
    return "\n".join([text.strip(), *bodies]) if bodies else text.strip()


class _Reader:
    """A one-pass reader over the command text."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0
        self.commands: list[Command] = [Command()]
        self.pending: list[tuple[int, int]] = []  # (command index, redirect index) awaiting a body

    def read(self) -> list[Command]:
        """Read the whole text into commands."""
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in " \t":
                self.pos += 1
            elif char == "\\" and self.text.startswith("\\\n", self.pos):
                self.pos += 2
            elif char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            elif char in "()":
                raise ShellSyntax("subshells and groups are not followed")
            elif char in "<>" or (char.isdigit() and self._fd_redirect()):
                self._redirect()
            elif char == "&" and self.text.startswith("&>", self.pos):
                self._redirect()
            elif self._operator():
                continue
            else:
                self._word()
        if self.pending:
            raise ShellSyntax("a here-document has no end")
        commands = [c for c in self.commands if c.words or c.redirects]
        if commands and commands[-1].joiner not in ("", "\n", ";", "&"):
            raise ShellSyntax("the command ends with an operator")
        if commands and commands[-1].joiner in ("\n", ";"):
            commands[-1].joiner = ""
        return commands

    def _fd_redirect(self) -> bool:
        end = self.pos
        while end < len(self.text) and self.text[end].isdigit():
            end += 1
        starts_word = self.pos == 0 or self.text[self.pos - 1] in " \t\n;&|"
        return starts_word and end < len(self.text) and self.text[end] in "<>"

    def _operator(self) -> bool:
        for op in _OPERATORS:
            if self.text.startswith(op, self.pos):
                self.pos += len(op)
                if op == "\n":
                    self._heredoc_bodies()
                    if not self.commands[-1].words and not self.commands[-1].redirects:
                        return True  # a blank line or a line after an operator
                if op in (";;", "|&"):
                    raise ShellSyntax(f"operator {op} is not followed")
                self.commands[-1].joiner = op
                self.commands.append(Command())
                return True
        return False

    def _redirect(self) -> None:
        start = self.pos
        while self.text[self.pos].isdigit() or self.text[self.pos] == "&":
            self.pos += 1
        for op in ("<<<", "<<-", "<<", ">>", ">&", "<&", ">|", "<>", ">", "<"):
            if self.text.startswith(op, self.pos):
                self.pos += len(op)
                break
        op = self.text[start:self.pos]
        if op.endswith("&") and self.pos < len(self.text) and (self.text[self.pos].isdigit() or
                                                               self.text[self.pos] == "-"):
            self.pos += 1
            self.commands[-1].redirects.append(Redirect(op + self.text[self.pos - 1], ""))
            return
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1
        target = self._read_word()
        if target is None:
            raise ShellSyntax(f"redirection {op} has no target")
        command = self.commands[-1]
        if op in ("<<", "<<-"):
            quoted = target.raw != target.value or "\\" in target.raw
            command.redirects.append(Redirect(op, target.value, "", quoted))
            self.pending.append((len(self.commands) - 1, len(command.redirects) - 1))
        else:
            command.redirects.append(Redirect(op, target.raw if target.expands else target.value))

    def _heredoc_bodies(self) -> None:
        for index, slot in self.pending:
            redirect = self.commands[index].redirects[slot]
            lines: list[str] = []
            while True:
                if self.pos >= len(self.text):
                    raise ShellSyntax(f"here-document {redirect.target!r} has no end")
                end = self.text.find("\n", self.pos)
                line = self.text[self.pos:] if end < 0 else self.text[self.pos:end]
                self.pos = len(self.text) if end < 0 else end + 1
                probe = line.lstrip("\t") if redirect.op == "<<-" else line
                if probe == redirect.target:
                    break
                lines.append(line)
            body = "\n".join(lines) + ("\n" if lines else "")
            self.commands[index].redirects[slot] = Redirect(redirect.op, redirect.target, body, redirect.quoted)
        self.pending.clear()

    def _word(self) -> None:
        word = self._read_word()
        if word is None:
            raise ShellSyntax(f"unexpected character {self.text[self.pos]!r}")
        self.commands[-1].words.append(word)

    def _read_word(self) -> Word | None:
        start, value, expands = self.pos, [], False
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in " \t\n;&|<>()":
                break
            if char == "'":
                end = self.text.find("'", self.pos + 1)
                if end < 0:
                    raise ShellSyntax("unbalanced single quote")
                value.append(self.text[self.pos + 1:end])
                self.pos = end + 1
            elif char == '"':
                text, dynamic = self._double_quoted()
                value.append(text)
                expands = expands or dynamic
            elif char == "\\":
                if self.pos + 1 >= len(self.text):
                    raise ShellSyntax("a backslash ends the command")
                value.append(self.text[self.pos + 1])
                self.pos += 2
            else:
                if char in "$`" or char in _GLOB or (char == "~" and self.pos == start) or char == "{":
                    expands = True
                value.append(char)
                self.pos += 1
        if self.pos == start:
            return None
        return Word("".join(value), self.text[start:self.pos], expands)

    def _double_quoted(self) -> tuple[str, bool]:
        self.pos += 1
        out: list[str] = []
        dynamic = False
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out), dynamic
            if char == "\\" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] in '$`"\\\n':
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if char in "$`":
                dynamic = True
            out.append(char)
            self.pos += 1
        raise ShellSyntax("unbalanced double quote")
