"""Approvals for calls that may change the workspace: an allow-list, a mode, and who decides.

    policy = load_policy(repo, yolo=args.yolo)       # ~/.config/tao/config.toml, then the repo's .tao.toml
    request = request_for(call.name, call.arguments, tool.effect)  # None: the call only reads
    verdict = await policy.decide(request.text, request.edit)  # None: no approval needed

A bash command needs approval unless every simple command in it only reads (`ls`, `cat`, `grep`,
`git diff`, ... as the speculation's shell reader judges them) or starts with an allow-listed prefix,
with no redirection into a file and no command substitution. Every call of a file tool that changes the
workspace (edit_file, write_file) needs approval too. What needs it is then settled by the mode, by an
earlier "always" for the same command or file, by the user through `ask` (the TUI's modal), or, when
nobody can be asked (headless), by the `headless` rule of the policy. Config file:

    [approvals]
    mode = "ask"                      # read-only | ask (default) | auto-edit | full-auto (alias: yolo)
    allow = ["pytest", "make test"]   # command prefixes that never ask (added to the defaults)
    headless = "allow"                # what a run with nobody to ask does: "allow" (default) or "deny"

Modes: read-only refuses every change; ask asks about commands and edits; auto-edit lets edits run and
asks about commands; full-auto (`--yolo`) runs everything. A repository's `.tao.toml` may extend `allow`
and make the policy stricter (a stricter mode, `headless = "deny"`), never looser.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.calls.shellwords import ShellSyntax, parse
from harness.calls.shellmap import readonly, strip_assignments
from tools.base import Effect

DEFAULT_ALLOW = ("pytest", "python -m pytest", "python3 -m pytest")
SHELL_TOOL = "bash"  # the tool whose commands the allow-list judges; other mutating tools are edits
_HARMLESS_REDIRECTS = {">/dev/null", "2>/dev/null", "2>&1", ">&2", "1>&2", "&>/dev/null"}
_CONFIG = "[approvals] in ~/.config/tao/config.toml"


@dataclass(frozen=True)
class Mode:
    """What a mode does with a call that needs approval: True runs it, False refuses it, None asks."""

    commands: bool | None
    edits: bool | None


# From the strictest to the loosest; a repository's .tao.toml may only move the mode to the left.
MODES = {"read-only": Mode(False, False), "ask": Mode(None, None), "auto-edit": Mode(None, True),
         "full-auto": Mode(True, True)}
ALIASES = {"yolo": "full-auto"}  # the older name, and what --yolo sets


@dataclass(frozen=True)
class Answer:
    """The user's answer: `once`, `always` (this command, for the rest of the session) or `deny`."""

    choice: str
    message: str = ""  # told to the model with a denial


@dataclass(frozen=True)
class Verdict:
    """The decision on one call, as the `approval` event records it, and what the model is told if refused."""

    allow: bool
    by: str  # user, always, headless, or the mode that decided (read-only, auto-edit, full-auto, yolo)
    message: str = ""  # the user's words with a denial
    reason: str = ""  # the observation the model gets instead of the call's result


@dataclass(frozen=True)
class Request:
    """What a call asks leave to do: the words the user reads and the `approval` event records."""

    text: str  # the shell command, or the tool and the file it changes
    edit: bool  # a file tool's change, not a shell command


Ask = Callable[[str], Awaitable[Answer]]


def request_for(name: str, arguments: dict[str, Any], effect: Effect) -> Request | None:
    """The leave a call needs before it runs: its shell command, or the file a mutating tool changes."""
    if name == SHELL_TOOL:
        command = arguments.get("command")
        return Request(command, edit=False) if isinstance(command, str) else None
    if effect is not Effect.MUTATING:
        return None
    path = arguments.get("path")
    return Request(f"{name} {path}" if isinstance(path, str) else name, edit=True)


def needs_approval(command: str, allow: tuple[str, ...] = DEFAULT_ALLOW) -> bool:
    """Whether a bash command may change the workspace and is outside the allow-list."""
    try:
        commands = parse(command)
    except ShellSyntax:
        return True  # subshells, command substitution: not followed, so asked
    prefixes = [shlex.split(entry) for entry in allow]
    for simple in commands:
        if any("`" in word.raw for word in simple.words):
            return True
        if readonly(simple):
            continue
        argv = strip_assignments(simple)
        redirects_ok = all(f"{r.op}{r.target}" in _HARMLESS_REDIRECTS for r in simple.redirects)
        if not (redirects_ok and any(argv[:len(p)] == p for p in prefixes if p)):
            return True
    return False


@dataclass
class ApprovalPolicy:
    """What runs without asking, and who is asked about the rest."""

    mode: str = "ask"
    allow: tuple[str, ...] = DEFAULT_ALLOW
    headless: str = "allow"
    ask: Ask | None = None
    always: set[tuple[bool, str]] = field(default_factory=set)  # (edit, text) the user allowed for the session

    def with_ask(self, ask: Ask | None) -> ApprovalPolicy:
        """The same policy, asking through `ask` (the front end's question to the user)."""
        return replace(self, ask=ask, always=set(self.always))

    async def decide(self, command: str, edit: bool = False) -> Verdict | None:
        """None when the call needs no approval; else who allowed or refused it, and what the model is told."""
        if not edit and not needs_approval(command, self.allow):
            return None
        what = "edit" if edit else "command"
        settled = self._settled(edit)
        if settled is not None:
            return Verdict(settled, self.mode, reason="" if settled else self._mode_refusal(what))
        if (edit, command) in self.always:
            return Verdict(True, "always")
        if self.ask is None:
            allowed = self.headless == "allow"
            return Verdict(allowed, "headless", reason="" if allowed else self._headless_refusal(what))
        answer = await self.ask(command)
        if answer.choice == "always":
            self.always.add((edit, command))
        allowed = answer.choice in ("once", "always")
        said = f" They said: {answer.message}" if answer.message else ""
        return Verdict(allowed, "user", answer.message,
                       "" if allowed else f"The user did not allow this {what}, so it was not run.{said}")

    def allows_unasked(self, command: str, edit: bool = False) -> bool:
        """Whether the call would run with nobody asked: what a speculation may assume before the real call."""
        if not edit and not needs_approval(command, self.allow):
            return True
        settled = self._settled(edit)
        if settled is not None:
            return settled
        return (edit, command) in self.always or (self.ask is None and self.headless == "allow")

    def _settled(self, edit: bool) -> bool | None:
        """What the mode alone says of an edit or a command: allowed, refused, or None (someone decides)."""
        mode = MODES[ALIASES.get(self.mode, self.mode)]
        return mode.edits if edit else mode.commands

    def _mode_refusal(self, what: str) -> str:
        """Why the mode refused a call without asking anyone, and how the user can allow it."""
        return (f"Not run: the approval policy refused this {what} without asking anyone (approval mode "
                f"\"{self.mode}\" refuses every change to the workspace). Work without changing files, or tell "
                f"the user that allowing changes takes mode = \"ask\", \"auto-edit\" or \"full-auto\" under {_CONFIG}.")

    def _headless_refusal(self, what: str) -> str:
        """Why a run with nobody to ask refused a call, and how the user can allow it."""
        loosest = "auto-edit" if what == "edit" else "full-auto"
        return (f"Not run: nobody can be asked in this run, and the approval policy refuses what would need "
                f"asking (mode \"{self.mode}\", headless = \"deny\"). Tell the user that allowing this {what} "
                f"takes headless = \"allow\" or mode = \"{loosest}\" under {_CONFIG}, or --yolo.")


def config_paths(repo: Path) -> tuple[Path, Path]:
    """The user's config file ($XDG_CONFIG_HOME/tao/config.toml) and the repository's .tao.toml."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "tao" / "config.toml", repo / ".tao.toml"


def load_policy(repo: Path, yolo: bool = False, mode: str | None = None) -> ApprovalPolicy:
    """The policy from the config files (user first, then the repository's, which may only tighten it); the command
    line's `--mode` or `--yolo` then sets the mode, as the user asked for this run."""
    if mode is not None and mode not in (*MODES, *ALIASES):
        raise UsageError(f"--mode takes one of {', '.join(MODES)} (got {mode!r})")
    user, project = config_paths(repo)
    policy = ApprovalPolicy()
    for path, trusted in ((user, True), (project, False)):
        section = _read(path).get("approvals", {})
        configured = section.get("mode", policy.mode)
        headless = section.get("headless", policy.headless)
        allow = section.get("allow", [])
        if configured not in (*MODES, *ALIASES) or headless not in ("allow", "deny") or not isinstance(allow, list):
            raise UsageError(f"{path}: [approvals] takes mode = \"read-only\"|\"ask\"|\"auto-edit\"|\"full-auto\", "
                             "headless = \"allow\"|\"deny\" and allow = [\"command prefix\", ...]")
        if not trusted:  # a repository's own file may not loosen what the user set
            configured = configured if _looseness(configured) < _looseness(policy.mode) else policy.mode
            headless = "deny" if "deny" in (headless, policy.headless) else "allow"
        policy = replace(policy, mode=configured, headless=headless,
                         allow=policy.allow + tuple(str(item) for item in allow))
    return replace(policy, mode="yolo" if yolo else mode or policy.mode)


def _looseness(mode: str) -> int:
    """A mode's place from the strictest (0) to the loosest."""
    return list(MODES).index(ALIASES.get(mode, mode))


def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
