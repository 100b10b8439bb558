"""Find out, once per process, what this machine allows: which namespaces, which overlayfs options,
whether fuse-overlayfs works. Every answer comes from really trying it in a scratch directory.

The order of attempts: as root, the stage's namespaces owned by real root with the command in its own
user namespace (the whole id range mapped); then `unshare -Urm`-style user namespaces (the only choice
when not root). What cannot be had is given up one piece at a time and noted: the pid namespace, the
command's network namespace, its user namespace (its capabilities are cut instead), the overlay of /
(the rest of the file system becomes read-only). A run on a machine without some of these is tainted
for it (`Capabilities.taints`): the sandbox then cannot tell whether a run saw the real world.

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

from sandbox.sandbox_errors import SetupFailed
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
    inner: str = "userns"  # how the command gives up its powers: its own user namespace, or "caps"
    world: str = "overlay"  # the rest of the file system: "overlay" (throwaway layers) or "readonly"
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
            "inner": self.inner,
        }

    def world_spec(self, directory: Path, *, size: int, shm: int) -> dict[str, Any]:
        """The stage spec's `world`: the run's view of the rest of the file system, built on `directory`."""
        options = [["userxattr"], []] if self.userns else [[], ["metacopy=off"]]
        return {"dir": str(directory), "mode": self.world, "size": size, "shm": shm, "options": options}

    def taints(self, *, network: bool) -> list[str]:
        """Why no run here can be known to have seen the real world (empty on a machine with everything)."""
        if not self.mountns:
            return ["this backend cannot isolate the run: no mount namespace can be made here, so the run "
                    "acts on the real system outside its copy of the workspace"]
        out = []
        if not self.pidns:
            out.append("no pid namespace here: the sandbox cannot watch the whole run or end what it leaves")
        if not self.netns and not network:
            out.append("no network namespace here: the run could reach the real network unseen")
        if self.world != "overlay":
            out.append("no overlay of / here: the rest of the file system is read-only in the sandbox, so a "
                       "write there fails where a real run's would succeed")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "state_dir": str(self.base), "mount_namespace": self.mountns, "user_namespace": self.userns,
            "network_namespace": self.netns, "pid_namespace": self.pidns, "command_confinement": self.inner,
            "world": self.world, "taints": self.taints(network=False),
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
    paths = {n: state / n for n in ("ws", "upper", "work", "view", "world")}
    for p in paths.values():
        p.mkdir()
    (paths["ws"] / "keep").write_text("kept\n")
    (paths["ws"] / "gone").write_text("x\n")
    (paths["ws"] / "dir").mkdir()
    (paths["ws"] / "dir" / "f").write_text("f\n")
    (paths["view"] / "only-in-view").write_text("v\n")
    return paths


FALLBACKS = (  # (failed step, spec key, value that needs it, value to fall back to, what the loss means)
    ("unshare", "pidns", True, False, "pid_namespace", "refused; the sandbox cannot watch or end the whole run"),
    ("net", "netns", True, False, "network_namespace", "refused; speculative runs keep the host network"),
    ("loopback", "netns", True, False, "network_namespace", "no loopback; speculative runs keep the host network"),
    ("inner-userns", "inner", "userns", "caps", "command_confinement",
     "no user namespace for the command; its capabilities are cut to the file powers instead"),
    ("world", "world", "overlay", "readonly", "world",
     "no overlay of / over a tmpfs; the rest of the file system is read-only in the sandbox"),
)


def probe_spec(userns: bool, paths: dict[str, Path]) -> dict[str, Any]:
    """The richest stage spec to try in one mode."""
    caps = Capabilities(base=paths["ws"], mountns=True, userns=userns, netns=True, pidns=True)
    spec = caps.namespace_spec(network=False)
    spec.update(mounts=[], cwd=str(paths["ws"]), world=caps.world_spec(paths["world"], size=16 << 20, shm=1 << 20))
    return spec


async def _namespaces(userns: bool, paths: dict[str, Path], notes: dict[str, str]) -> dict[str, Any] | None:
    """The richest namespace spec that works in this mode, or None."""
    spec = probe_spec(userns, paths)
    for _ in range(len(FALLBACKS) + 1):
        outcome = await _try(spec, ["true"])
        if outcome is None:
            return spec
        step = outcome.step if isinstance(outcome, SetupFailed) else ""
        for failed, key, needs, fallback, note, why in FALLBACKS:
            value = spec["world"]["mode"] if key == "world" else spec[key]
            if step == failed and value == needs:
                if key == "world":
                    spec["world"]["mode"] = fallback
                else:
                    spec[key] = fallback
                notes[note] = f"{why} ({outcome})"
                break
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
            spec = await _namespaces(userns, paths, notes)
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
            base=base, mountns=True, userns=userns, netns=spec["netns"], pidns=spec["pidns"], inner=spec["inner"],
            world=spec["world"]["mode"], overlay_options=options, fuse_binary=fuse, notes=notes,
        )
    finally:
        remove_tree(state)
