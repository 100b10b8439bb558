"""What a sandboxed run may use: wall time, memory, disk, priority, network, scratch space.

A real run has none of these limits, so a run that hits one is tainted (`sandbox.taint`): they are a
safety net, set where a test that passes for real is unlikely to reach them. The defaults are also
invisible to the run: memory and disk are watched by the sandbox's pid 1 (which ends a run past them)
rather than set as rlimits, which `ulimit -a` would show; CPU and file-size rlimits are off unless asked.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

GIB = 1 << 30


def machine_memory() -> int:
    """Physical memory of this machine in bytes (4 GiB if it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 4 * GIB


@dataclass(frozen=True)
class Limits:
    """Limits for commands run in an overlay. `None` means unlimited."""

    timeout: float | None = 600.0
    """Wall-clock seconds when `run()` is given no timeout; the whole process group is killed after it."""
    cpu_seconds: int | None = None
    """CPU seconds per process (RLIMIT_CPU, visible to the run): SIGXCPU at the limit, SIGKILL 5 s later.
    Off by default: the wall-clock timeout bounds a run already."""
    memory_bytes: int | None = machine_memory()
    """Resident memory of the run's whole process tree, watched by the sandbox's pid 1, which ends the run
    past it. The machine's RAM: a run past it would fail or swap in a real run too, while a lower figure
    fails tests that pass for real (a 4 GiB rlimit did)."""
    disk_reserve_bytes: int | None = 1 * GIB
    """Free space the run must leave on the file system of the workspace layer; pid 1 ends it below this,
    so a runaway write cannot fill the disk."""
    file_size_bytes: int | None = None
    """Largest file a process may write (RLIMIT_FSIZE, visible to the run); off by default."""
    nice: int = 10
    """Added niceness, so authoritative work gets the CPU first."""
    network: bool = False
    """False: a private network namespace with only loopback (speculative runs never reach out)."""
    scratch_bytes: int = 1 * GIB
    """Size of the tmpfs that takes a run's writes outside the workspace (in /tmp, $HOME, ...): they taint
    the run anyway, so past this they may as well fail."""
    shm_bytes: int = 256 << 20
    """Size of the run's private /dev/shm."""

    def rlimits(self) -> dict[str, list[int]]:
        """The rlimits for the sandbox stage, by resource name, never above the current hard limits."""
        wanted = {"RLIMIT_CPU": (self.cpu_seconds, 5), "RLIMIT_FSIZE": (self.file_size_bytes, 0)}
        out: dict[str, list[int]] = {}
        for name, (soft, slack) in wanted.items():
            if soft is None:
                continue
            _, hard_now = resource.getrlimit(getattr(resource, name))
            limits = [soft, soft + slack]
            out[name] = limits if hard_now == resource.RLIM_INFINITY else [min(v, hard_now) for v in limits]
        return out


    def watched(self) -> dict[str, int | None]:
        """What the sandbox's pid 1 enforces by watching the run (the stage spec's `guard`)."""
        return {"memory": self.memory_bytes, "disk_reserve": self.disk_reserve_bytes}


SPECULATIVE = Limits()
"""The defaults for speculative runs: no network, nice 10, the limits above."""
