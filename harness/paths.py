"""Where Tao keeps its state on this machine: the folder of trajectories, checkpoints and logs."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path


def state_dir() -> Path:
    """Where Tao keeps trajectories: $XDG_STATE_HOME/tao (default ~/.local/state/tao)."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "tao"


def default_trajectory_path() -> Path:
    """A new trajectory file in the state folder, named by the time and a random tag."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return state_dir() / "trajectories" / f"{stamp}-{uuid.uuid4().hex[:6]}.jsonl"
