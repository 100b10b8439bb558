"""What a sandboxed run may use: wall time, CPU, memory, file size, priority, network, private /tmp."""

from __future__ import annotations

import resource
from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """Limits for commands run in an overlay. `None` means unlimited."""

    timeout: float | None = 600.0
    """Wall-clock seconds when `run()` is given no timeout; the whole process group is killed after it."""
    cpu_seconds: int | None = 600
    """CPU seconds per process (RLIMIT_CPU): SIGXCPU at the limit, SIGKILL 5 s later."""
    memory_bytes: int | None = 4 * GIB
    """Heap and anonymous memory per process (RLIMIT_DATA; unlike RLIMIT_AS it spares address-space
    reservations such as V8's or the JVM's)."""
    file_size_bytes: int | None = 4 * GIB
    """Largest file a process may write (RLIMIT_FSIZE), so a runaway run cannot fill the disk."""
    nice: int = 10
    """Added niceness, so authoritative work gets the CPU first."""
    network: bool = False
    """False: a private network namespace with only loopback (speculative runs never reach out)."""
    private_tmp: bool = True
    """/tmp, /var/tmp and /dev/shm private to the overlay, discarded with it."""
    shm_bytes: int = 256 << 20
    """Size of the private /dev/shm."""

    def rlimits(self) -> dict[str, list[int]]:
        """The rlimits for the sandbox stage, by resource name, never above the current hard limits."""
        wanted = {
            "RLIMIT_CPU": (self.cpu_seconds, 5),
            "RLIMIT_DATA": (self.memory_bytes, 0),
            "RLIMIT_FSIZE": (self.file_size_bytes, 0),
        }
        out: dict[str, list[int]] = {}
        for name, (soft, slack) in wanted.items():
            if soft is None:
                continue
            _, hard_now = resource.getrlimit(getattr(resource, name))
            cap = lambda v: v if hard_now == resource.RLIM_INFINITY else min(v, hard_now)  # noqa: E731
            out[name] = [cap(soft), cap(soft + slack)]
        return out


SPECULATIVE = Limits()
"""The defaults for speculative runs: no network, private /tmp, nice 10."""
