"""The machine numbers come from, as benchmarks and `tao sandbox check` report it."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """The machine the numbers come from: CPU model, cores, kernel, Python and the load averages now."""
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "load": [round(x, 2) for x in os.getloadavg()]}
