"""Approvals for shell commands that may change the workspace: an allow-list, a mode, and who decides.

    policy = load_policy(repo, yolo=args.yolo)       # ~/.config/tao/config.toml, then the repo's .tao.toml
    verdict = await policy.decide(command)           # None: no approval needed (read-only or allow-listed)

A bash command needs approval unless every simple command in it only reads (`ls`, `cat`, `grep`,
`git diff`, ... as the speculation's shell reader judges them) or starts with an allow-listed prefix,
with no redirection into a file and no command substitution. A command that needs it is then allowed by
`--yolo`, by an earlier "always" for the same command, by the user through `ask` (the TUI's modal), or,
when nobody can be asked (headless), by the `headless` rule of the policy. Config file:

    [approvals]
    mode = "ask"                      # or "yolo": run every command without asking
    allow = ["pytest", "make test"]   # command prefixes that never ask (added to the defaults)
    headless = "allow"                # what a run with nobody to ask does: "allow" (default) or "deny"

A repository's `.tao.toml` may extend `allow` and set `headless = "deny"`, never turn on yolo.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.errors import UsageError
from harness.speculation.shell import ShellSyntax, parse
from harness.speculation.shellmap import readonly, strip_assignments

DEFAULT_ALLOW = ("pytest", "python -m pytest", "python3 -m pytest")
_HARMLESS_REDIRECTS = {">/dev/null", "2>/dev/null", "2>&1", ">&2", "1>&2", "&>/dev/null"}


@dataclass(frozen=True)
class Answer:
    """The user's answer: `once`, `always` (this command, for the rest of the session) or `deny`."""

    choice: str
    message: str = ""  # told to the model with a denial


@dataclass(frozen=True)
class Verdict:
    """The decision on one command, as the `approval` event records it."""

    allow: bool
    by: str  # user, always, yolo or headless
    message: str = ""


Ask = Callable[[str], Awaitable[Answer]]


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
    always: set[str] = field(default_factory=set)  # commands the user allowed for this session

    def with_ask(self, ask: Ask | None) -> ApprovalPolicy:
        """The same policy, asking through `ask` (the front end's question to the user)."""
        return replace(self, ask=ask, always=set(self.always))

    async def decide(self, command: str) -> Verdict | None:
        """None when the command needs no approval; else who allowed or refused it."""
        if not needs_approval(command, self.allow):
            return None
        if self.mode == "yolo":
            return Verdict(True, "yolo")
        if command in self.always:
            return Verdict(True, "always")
        if self.ask is None:
            return Verdict(self.headless == "allow", "headless")
        answer = await self.ask(command)
        if answer.choice == "always":
            self.always.add(command)
        return Verdict(answer.choice in ("once", "always"), "user", answer.message)


def config_paths(repo: Path) -> tuple[Path, Path]:
    """The user's config file ($XDG_CONFIG_HOME/tao/config.toml) and the repository's .tao.toml."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "tao" / "config.toml", repo / ".tao.toml"


def load_policy(repo: Path, yolo: bool = False) -> ApprovalPolicy:
    """The policy from the config files (user first, then the repository's), and `--yolo`."""
    user, project = config_paths(repo)
    policy = ApprovalPolicy()
    for path, trusted in ((user, True), (project, False)):
        section = _read(path).get("approvals", {})
        mode = section.get("mode", policy.mode)
        headless = section.get("headless", policy.headless)
        allow = section.get("allow", [])
        if mode not in ("ask", "yolo") or headless not in ("allow", "deny") or not isinstance(allow, list):
            raise UsageError(f"{path}: [approvals] takes mode = \"ask\"|\"yolo\", headless = \"allow\"|\"deny\" "
                             "and allow = [\"command prefix\", ...]")
        policy = replace(policy, mode=mode if trusted else policy.mode, headless=headless,
                         allow=policy.allow + tuple(str(item) for item in allow))
    return replace(policy, mode="yolo") if yolo else policy


def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
