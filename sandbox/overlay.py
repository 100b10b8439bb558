"""A copy-on-write view of the workspace at the workspace's own absolute path.

    async with Overlay(workspace) as ov:           # or: ov = await Overlay.create(workspace)
        result = await ov.run(["pytest", "-q"])     # same surface as Workspace.run
        ov.changes()                                # what the run would have changed
    # discarded: layers deleted, the real tree untouched

Each `run` starts the sandbox stage (`enter.py`): private namespaces, a new root in which the rest of
the file system is the real one under throwaway layers and the backend's view is mounted at the
workspace path, no network but loopback, a command with no power over any of it, its own process
group (killed on timeout or cancel), rlimits and nice. Runs in one overlay share the workspace layers,
one at a time (what they write elsewhere is dropped after each run). `taints()` says why a run may have
seen another world than a real run (`sandbox.taint`). See `sandbox.backends` for the backends and
`sandbox.probe` for detection.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.backends import Backend, Layout, choose
from sandbox.changes import Change
from sandbox.cleanup import sweep_once
from sandbox.sandbox_errors import OverlayClosed
from sandbox.limits import SPECULATIVE, Limits
from sandbox.probe import Capabilities, detect
from sandbox.process import DEFAULT_MAX_BYTES, ProcessResult, renice_session, session_cpu
from sandbox.runner import run_in_sandbox
from sandbox.statedir import choose_base, new_state_dir, remove_tree
from sandbox.taint import SIGNS, hard_links, of_run, root_attributes, unmapped_signs
from sandbox.workspace import confine, relative_to

if TYPE_CHECKING:
    from sandbox.workspace import Workspace


class Overlay:
    """A throwaway copy-on-write view of a workspace; tools run in it as they would in the workspace."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        backend: str | None = None,
        limits: Limits | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.workspace = workspace
        self.version: int = workspace.version
        self.root: Path = workspace.root
        self.limits = limits or SPECULATIVE
        self.skipped: dict[str, str] = {}  # better backends that do not work here, and why
        self._requested = backend
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._backend: Backend | None = None
        self._caps: Capabilities | None = None
        self._layout: Layout | None = None
        self._lock = asyncio.Lock()
        self._running: set[asyncio.Future[ProcessResult]] = set()
        self._sessions: set[int] = set()  # session ids of the runs started, for boost()
        self._live: int | None = None  # the session id of the run going on now
        self._cpu_done: float | None = 0.0  # CPU seconds of the finished runs; None once one could not count
        self._boosted = False  # once boosted, later runs (and runs still setting up) are not niced
        self._closed = False
        self._taints: list[str] = []  # why a run here may have seen another world than a real run
        self._links: list[str] = []  # hard links among the changed paths, as last checked

    # -- lifecycle ---------------------------------------------------------------------------------

    @classmethod
    async def create(cls, workspace: Workspace, **options: Any) -> Overlay:
        """Make an overlay and its layers."""
        return await cls(workspace, **options).open()

    async def open(self) -> Overlay:
        """Create the state dir and the backend's layers (idempotent)."""
        async with self._lock:
            if self._closed:
                raise OverlayClosed("this overlay was discarded; create a new one")
            if self._layout is not None:
                return self
            real_root = self.workspace.root
            base = choose_base(real_root, self._state_dir)
            await asyncio.to_thread(sweep_once, base)
            caps = await detect(base)
            backend, self.skipped = choose(caps, real_root, self._requested)
            layout = Layout(new_state_dir(base, real_root, backend.name))
            try:
                layout.world.mkdir(mode=0o700)
                await backend.prepare(real_root, layout, same_path=caps.mountns)
            except BaseException:
                await asyncio.to_thread(remove_tree, layout.state)
                raise
            self._caps, self._backend, self._layout = caps, backend, layout
            self.root = real_root if self.same_path else layout.view
            self._taints += caps.taints(network=self.limits.network)
            if backend.name == "git-worktree":
                self._taints.append("the git-worktree view lacks ignored files (build outputs, environments)")
            return self

    async def discard(self) -> None:
        """Kill any command still running in it, then delete its layers. Safe to call twice."""
        self._closed = True
        running = list(self._running)
        for future in running:
            future.cancel()
        if running:
            await asyncio.wait(running)
        async with self._lock:
            if self._layout is not None and self._layout.state.exists():
                if self._backend is not None:
                    await asyncio.to_thread(self._link_taints)  # the layers are about to go
                await asyncio.to_thread(remove_tree, self._layout.state)

    close = discard

    async def __aenter__(self) -> Overlay:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.discard()

    # -- what it is ----------------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """The backend's name ("overlayfs", "fuse-overlayfs", "git-worktree", "copy")."""
        return self._backend.name if self._backend is not None else (self._requested or "")

    @property
    def same_path(self) -> bool:
        """True when commands see the view at the workspace's own path (always, given a mount namespace)."""
        return self._caps is not None and self._caps.mountns

    @property
    def confines(self) -> bool:
        """True when a command run here cannot act on the real system: it sees the view at the workspace's own
        path in a private mount namespace. Without one (a copy or worktree elsewhere) it runs unconfined, so
        nothing should be run here that the user did not ask for."""
        return self.same_path

    @property
    def state_path(self) -> Path | None:
        """Where the layers live on the host (None before open)."""
        return self._layout.state if self._layout is not None else None

    @property
    def isolation(self) -> dict[str, bool]:
        """Which protections the runs get on this machine."""
        caps = self._caps
        if caps is None:
            return {}
        return {"mount_namespace": caps.mountns, "network": caps.netns and not self.limits.network,
                "pid_namespace": caps.pidns, "user_namespace_for_the_command": caps.inner == "userns",
                "throwaway_world": caps.mountns and caps.world == "overlay"}

    def current(self) -> bool:
        """True while the workspace is still at this overlay's version (outside changes are checked first)."""
        return self.workspace.refresh() == self.version

    def resolve(self, path: str | os.PathLike[str] = ".") -> Path:
        """Confine a path to the overlay's root, as Workspace.resolve does (symlinks seen from the host)."""
        return confine(self.root, path)

    def relative(self, path: Path) -> str:
        """The root-relative spelling of a path inside the root."""
        return relative_to(self.root, path)

    # -- running -------------------------------------------------------------------------------------

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> ProcessResult:
        """Run a command inside the overlay with the limits; killed (whole group) on timeout or cancel.

        Raises OverlayClosed if the overlay is discarded meanwhile, SetupFailed if the sandbox cannot
        be built, FileNotFoundError/PermissionError like Workspace.run when the program cannot run.
        """
        await self.open()
        async with self._lock:
            if self._closed:
                raise OverlayClosed("this overlay was discarded; create a new one")
            reported: list[dict[str, Any]] = []
            limit = self.limits.timeout if timeout is None else timeout
            spec = self._spec()
            unmapped = unmapped_signs() if spec.get("userns") else ()
            inner = asyncio.ensure_future(
                run_in_sandbox(spec, argv, timeout=limit, env=env, stdin=stdin, max_bytes=max_bytes,
                               on_start=self._started, on_report=reported.append, watch=SIGNS + unmapped)
            )
            self._running.add(inner)
            try:
                result = await inner
                facts = reported[0] if reported else None
                cpu = facts.get("cpu") if facts else None
                self._cpu_done = self._cpu_done + cpu if cpu is not None and self._cpu_done is not None else None
                self._taints += of_run(result, facts, limits=self.limits, timeout=limit,
                                       watched=self.same_path, unmapped=unmapped)
                return result
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closed and inner.cancelled() and task is not None and not task.cancelling():
                    raise OverlayClosed("the overlay was discarded while the command ran; it was killed") from None
                raise
            finally:
                self._running.discard(inner)
                self._live = None

    def _started(self, sid: int) -> None:
        """Note the session id of the run that just started (for boost and cpu_seconds)."""
        self._sessions.add(sid)
        self._live = sid

    def cpu_seconds(self) -> float | None:
        """CPU seconds its runs have used so far (user and system, the whole process tree): finished runs as
        their sandbox stage counted them, the run going on now read from /proc. None when a finished run
        could not count (a stage without a pid namespace execs the command instead of waiting for it)."""
        if self._cpu_done is None:
            return None
        return self._cpu_done + (session_cpu(self._live) if self._live is not None else 0.0)

    def boost(self) -> bool:
        """Run at Tao's own priority from now on: the real call is waiting for this run's result.

        False where the nice value cannot be lowered again (not root): the run goes on niced."""
        self._boosted = True
        base = os.getpriority(os.PRIO_PROCESS, 0)
        return any([renice_session(sid, base) for sid in self._sessions])

    def taints(self) -> list[str]:
        """Why the runs so far may have seen a different world than a real run would (empty: nothing seen).

        Reasons are for people and accumulate over every run in this overlay; a tainted result must not
        be promoted. Safe to call after the runs finished, and after discard (which keeps the last check
        of hard links)."""
        if not self._closed and self._backend is not None:
            self._link_taints()
        return list(dict.fromkeys(self._taints + self._links))

    def _link_taints(self) -> None:
        """Re-check the changed paths for hard links in the real tree, and the workspace directory's own mode
        and owner (see `sandbox.taint`)."""
        assert self._backend is not None and self._layout is not None
        try:
            self._links = hard_links(self.workspace.root, self._backend.changes(self.workspace.root, self._layout))
            self._links += root_attributes(self.workspace.root, self._backend.seen_root(self._layout))
        except OSError as exc:
            self._links = [f"its changes could not be listed to check for hard links: {exc}"]

    def changes(self) -> list[Change]:
        """Every path the runs so far created, modified, deleted or touched, against the real tree."""
        if self._closed:
            raise OverlayClosed("this overlay was discarded; its changes are gone")
        if self._backend is None or self._layout is None:
            return []
        return self._backend.changes(self.workspace.root, self._layout)

    def _spec(self) -> dict[str, Any]:
        """The stage spec for one run."""
        assert self._caps is not None and self._backend is not None and self._layout is not None
        caps, layout, root = self._caps, self._layout, self.workspace.root
        spec = caps.namespace_spec(network=self.limits.network)
        if caps.mountns:
            spec["mounts"] = self._backend.mounts(root, layout)
            spec["world"] = caps.world_spec(layout.world, size=self.limits.scratch_bytes, shm=self.limits.shm_bytes)
        spec.update(cwd=str(self.root), rlimits=self.limits.rlimits(), guard=self.limits.watched(),
                    nice=0 if self._boosted else self.limits.nice)
        return spec
