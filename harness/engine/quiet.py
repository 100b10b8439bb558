"""Known-harmless noise of vLLM, torch and transformers, kept off the user's terminal; real errors stay visible.

On a CPU machine every engine start printed, on stderr, in each of its three processes (Tao, vLLM's engine
core and its worker): "Triton is installed, but doesn't include CPU backend", a FutureWarning about
`torch.distributed.reduce_op`, torch's "NUMA binding" warning, a progress bar for a one-shard model, and at
exit the resource tracker's count of shared memory it cleaned up after the engine. None of it asks anything of
the user. vLLM's engine processes inherit the environment, so most of this is said with environment variables;
a variable the user has set already wins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from harness.environ import kept_environment

if TYPE_CHECKING:
    from warnings import _ActionKind  # typeshed's name for the actions filterwarnings takes

HARMLESS_WARNINGS = (
    # vLLM's Triton dispatcher touches torch.distributed's deprecated alias while it looks for kernels.
    "ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning",
    # The tracker unlinks the shared memory vLLM's engine processes leave behind when they are stopped; the
    # warning says it did.
    "ignore::UserWarning:multiprocessing.resource_tracker",
)
QUIET_ENVIRONMENT = {
    "VLLM_LOGGING_LEVEL": "ERROR",
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",  # never stdout: it carries the --json events and --quiet's answer
    "TOKENIZERS_PARALLELISM": "false",
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # torch's C++ warnings ("NUMA binding: Using MEMBIND policy ...")
}


def quiet_libraries() -> None:
    """Silence the known-harmless messages in this process and in the engine processes it starts."""
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    present = [entry for entry in os.environ.get("PYTHONWARNINGS", "").split(",") if entry]
    # The user's own filters come last, so they win over these (the last matching -W option wins).
    os.environ["PYTHONWARNINGS"] = ",".join([*(w for w in HARMLESS_WARNINGS if w not in present), *present])
    for entry in HARMLESS_WARNINGS:
        action, message, category, module = (entry.split(":") + ["", "", "", ""])[:4]
        kind = {"FutureWarning": FutureWarning, "UserWarning": UserWarning, "": Warning}[category]
        warnings.filterwarnings(cast("_ActionKind", action), message, kind, module)
    # vLLM configures its logging only when an engine is built; what its modules log while they are imported
    # (the Triton check among them) would reach Python's last-resort handler, which prints every warning.
    try:
        logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())
    except ValueError:
        pass  # a level Python does not know: vLLM itself will say so


ENGINE_ONLY = ("PYTHONWARNINGS", "TORCH_CPP_LOG_LEVEL")
"""Variables set for the engine's processes only: the commands Tao runs for the model (tests, scripts) must see
the user's own."""


@contextlib.contextmanager
def quiet_engine_start() -> Iterator[None]:
    """`quiet_libraries` for the engine processes started inside; the user's ENGINE_ONLY variables again after."""
    with kept_environment(*ENGINE_ONLY):
        quiet_libraries()
        yield


def quiet_interrupt() -> None:
    """In a child of Tao's: SIGINT (a Ctrl-C reaches the whole process group) exits quietly with 130, `finally`
    blocks run, instead of printing a KeyboardInterrupt traceback; vLLM installs its own handler once it is ready."""

    def leave(signum: int, frame: object) -> None:
        sys.exit(130)

    signal.signal(signal.SIGINT, leave)
