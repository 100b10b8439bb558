"""Find out, once per process, what this machine allows: which namespaces, which overlayfs options,
whether fuse-overlayfs works. Every answer comes from really trying it in a scratch directory.

The order of attempts: as root, plain namespaces first (no user namespace), then `unshare -Urm`-style
user namespaces (the only choice when not root). Optional isolation (pid and network namespaces,
read-only rest of the file system) is dropped one by one if refused, and the loss is noted.

TAO_SANDBOX_NAMESPACES chooses the mode: "auto" (default), "user" (user namespaces even as root, as an
unprivileged user gets them) or "none" (no namespaces: only the copy-based backends, at their own path).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.errors import SetupFailed
from sandbox.runner import run_in_sandbox
from sandbox.statedir import new_state_dir, remove_tree

PROBE_TIMEOUT = 20.0
ROOT_OVERLAY_OPTIONS = (("redirect_dir=on", "metacopy=off"), ("metacopy=off",), ())
USERNS_OVERLAY_OPTIONS = (("userxattr", "metacopy=off"), ("userxattr",), ())
OVERLAY_CHECK = (
    'echo new > new && rm gone && rm -r dir && echo more >> keep && mkdir made && mv made moved '
    '&& test "$(cat keep)" = "$(printf "kept\\nmore")" && test ! -e gone && test -f new'
)


@dataclass(frozen=True)
class Capabilities:
    """What the sandbox can do here. `userns` is None when no mount namespace can be made at all."""

    base: Path
    mountns: bool = False
    userns: bool | None = None
    netns: bool = False
    pidns: bool = False
    readonly: bool = False
    overlay_options: tuple[str, ...] | None = None
    fuse_binary: str | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def namespace_spec(self, *, network: bool) -> dict[str, Any]:
        """The stage spec fields for a run (network=True keeps the host network)."""
        if not self.mountns:
            return {"ppid": os.getpid(), "mountns": False}
        return {
            "ppid": os.getpid(),
            "mountns": True,
            "userns": bool(self.userns),
            "uid": os.getuid(),
            "gid": os.getgid(),
            "netns": self.netns and not network,
            "pidns": self.pidns,
            "readonly": self.readonly,
            "drop_admin": not self.userns and os.geteuid() == 0,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "state_dir": str(self.base), "mount_namespace": self.mountns, "user_namespace": self.userns,
            "network_namespace": self.netns, "pid_namespace": self.pidns, "readonly_rest": self.readonly,
            "overlay_options": list(self.overlay_options) if self.overlay_options is not None else None,
            "fuse_overlayfs": self.fuse_binary, "notes": dict(self.notes),
        }


_cache: dict[tuple[Path, str], Capabilities] = {}
_locks: dict[tuple[Path, str, int], asyncio.Lock] = {}
MODES = ("auto", "user", "none")


def namespace_mode() -> str:
    """The mode TAO_SANDBOX_NAMESPACES asks for (see the module docstring)."""
    mode = os.environ.get("TAO_SANDBOX_NAMESPACES", "auto") or "auto"
    if mode not in MODES:
        raise ValueError(f"TAO_SANDBOX_NAMESPACES={mode!r} is not one of {', '.join(MODES)}; unset it for auto")
    return mode


async def detect(base: Path, *, fresh: bool = False) -> Capabilities:
    """The capabilities of this machine, probed in a scratch dir under `base` (cached per process)."""
    key = (base, namespace_mode())
    lock = _locks.setdefault((*key, id(asyncio.get_running_loop())), asyncio.Lock())
    async with lock:
        if fresh or key not in _cache:
            _cache[key] = await _probe(base, key[1])
        return _cache[key]


async def _try(spec: dict[str, Any], argv: list[str]) -> SetupFailed | str | None:
    """Run argv in a sandbox: None on success, the SetupFailed, or the output of a failing command."""
    try:
        result = await run_in_sandbox(spec, argv, timeout=PROBE_TIMEOUT, env=None)
    except SetupFailed as exc:
        return exc
    except OSError as exc:
        return str(exc)
    if result.exit_code != 0:
        return result.text.strip() or f"exit code {result.exit_code}"
    return None


def _scratch(state: Path) -> dict[str, Path]:
    """A tiny workspace and its layers for probing."""
    paths = {n: state / n for n in ("ws", "upper", "work", "view", "tmp")}
    for p in paths.values():
        p.mkdir()
    (paths["ws"] / "keep").write_text("kept\n")
    (paths["ws"] / "gone").write_text("x\n")
    (paths["ws"] / "dir").mkdir()
    (paths["ws"] / "dir" / "f").write_text("f\n")
    (paths["view"] / "only-in-view").write_text("v\n")
    return paths


async def _namespaces(userns: bool, cwd: Path, notes: dict[str, str]) -> dict[str, Any] | None:
    """The richest namespace spec that works in this mode, or None."""
    spec: dict[str, Any] = {
        "ppid": os.getpid(), "mountns": True, "userns": userns, "uid": os.getuid(), "gid": os.getgid(),
        "netns": True, "pidns": True, "readonly": True, "drop_admin": not userns and os.geteuid() == 0,
        "mounts": [], "cwd": str(cwd),
    }
    for _ in range(5):
        outcome = await _try(spec, ["true"])
        if outcome is None:
            return spec
        step = outcome.step if isinstance(outcome, SetupFailed) else ""
        if step == "unshare" and spec["pidns"]:
            spec["pidns"] = False
            notes["pid_namespace"] = "refused; background processes of a cancelled run may survive it"
        elif step in ("unshare", "loopback") and spec["netns"]:
            spec["netns"] = False
            notes["network_namespace"] = "refused; speculative runs keep the host network"
        elif step == "readonly" and spec["readonly"]:
            spec["readonly"] = False
            notes["readonly_rest"] = "refused; a command can write outside the workspace"
        else:
            notes[f"namespaces ({'user' if userns else 'root'})"] = str(outcome)
            return None
    return None


async def _overlay(spec: dict[str, Any], paths: dict[str, Path], options: tuple[tuple[str, ...], ...],
                   notes: dict[str, str]) -> tuple[str, ...] | None:
    """The first overlayfs option set that mounts and behaves, or None."""
    for opts in options:
        for name in ("upper", "work"):
            remove_tree(paths[name])
            paths[name].mkdir()
        mount = {"type": "overlay", "target": str(paths["ws"]), "lower": str(paths["ws"]),
                 "upper": str(paths["upper"]), "work": str(paths["work"]), "options": list(opts)}
        outcome = await _try({**spec, "mounts": [mount], "cwd": str(paths["ws"])}, ["sh", "-c", OVERLAY_CHECK])
        untouched = sorted(os.listdir(paths["ws"])) == ["dir", "gone", "keep"]
        if outcome is None and untouched:
            return opts
        notes["overlayfs"] = f"mount with options {','.join(opts) or '(none)'} failed: {outcome}"
    return None


async def _fuse(spec: dict[str, Any], paths: dict[str, Path], notes: dict[str, str]) -> str | None:
    """The fuse-overlayfs binary if it is installed and mounts here, else None."""
    binary = shutil.which("fuse-overlayfs")
    if binary is None:
        notes["fuse-overlayfs"] = "not installed (apt-get install fuse-overlayfs)"
        return None
    if not os.path.exists("/dev/fuse"):
        notes["fuse-overlayfs"] = "/dev/fuse is missing"
        return None
    for name in ("upper", "work"):
        remove_tree(paths[name])
        paths[name].mkdir()
    mount = {"type": "fuse-overlayfs", "binary": binary, "target": str(paths["ws"]), "lower": str(paths["ws"]),
             "upper": str(paths["upper"]), "work": str(paths["work"])}
    outcome = await _try({**spec, "mounts": [mount], "cwd": str(paths["ws"])}, ["sh", "-c", OVERLAY_CHECK])
    if outcome is None:
        return binary
    notes["fuse-overlayfs"] = f"installed but the mount failed: {outcome}"
    return None


async def _probe(base: Path, mode: str) -> Capabilities:
    """Try each mode and feature in a scratch dir; see the module docstring."""
    notes: dict[str, str] = {}
    if mode == "none":
        off = "namespaces are turned off (TAO_SANDBOX_NAMESPACES=none)"
        return Capabilities(base=base, notes={"overlayfs": off, "fuse-overlayfs": off})
    state = new_state_dir(base, base, "probe")
    try:
        paths = _scratch(state)
        modes = [False, True] if os.geteuid() == 0 and mode == "auto" else [True]
        spec = None
        for userns in modes:
            spec = await _namespaces(userns, paths["ws"], notes)
            if spec is not None:
                break
        if spec is None:
            notes["overlayfs"] = "no private mount namespace can be made here"
            notes["fuse-overlayfs"] = notes["overlayfs"]
            return Capabilities(base=base, notes=notes)
        userns = bool(spec["userns"])
        options = await _overlay(spec, paths, USERNS_OVERLAY_OPTIONS if userns else ROOT_OVERLAY_OPTIONS, notes)
        if options is not None:
            notes.pop("overlayfs", None)
        fuse = await _fuse(spec, paths, notes)
        return Capabilities(
            base=base, mountns=True, userns=userns, netns=spec["netns"], pidns=spec["pidns"],
            readonly=spec["readonly"], overlay_options=options, fuse_binary=fuse, notes=notes,
        )
    finally:
        remove_tree(state)
