"""Tool latency for the trace replay: measured where the trajectory has it, else a model per command class.

A call's seconds are its recorded duration when the trace has one (SWE-agent's `execution_time`, Tao's
own, Claude Code's tool_use-to-tool_result and mini-swe-agent 2's timestamps, as harness.traces gives
them; 0 means none). Otherwise the kind's seconds from harness.speculation.prediction.latency, which were
regressed from the 11.3k gaps between mini-swe-agent's model responses (a gap is the model's time plus
the tool's; regressed on the answer's output tokens and the call's kind). Those are checked against
real runs of such commands on this machine (`python -m harness.bench.replay.tool_times DIR`, three runs
each, the median; docs/BENCHMARKS.md, "Trace replay"), in the directory holding sympy 1.x (a SWE-bench
repository) and, with equivalent commands, in Tao's own repository:

    kind    command (in sympy's parent directory)                 sympy     Tao's repo   model
    read    cat sympy/core/basic.py                               0.012 s   0.002 s      0.05 s
    view    sed -n 100,180p sympy/core/basic.py                   0.009 s   0.002 s      0.05 s
    search  grep -rn 'def _eval_simplify' sympy                   0.38 s    0.004 s      0.5 s
    list    find sympy/core -name '*.py'                          0.011 s   0.40 s       0.1 s
    script  python -c 'import sympy; print(sympy.sqrt(8))'        0.82 s    0.60 s       1.0 s
    test    python -m pytest -q sympy/core/tests/test_basic.py    6.56 s    4.86 s       3.5 s

The default table ("trace") keeps the trace-derived figures, which describe the machines these
trajectories ran on; "local" (LOCAL_SECONDS) uses the sympy column. The model is weakest for test runs,
whose time spans 0.5 s to minutes with the selection and the repository, and for searches, whose time
grows with the tree; reads and writes are inflated by each agent's shell round trip.
"""

from __future__ import annotations

import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness.calls.action import Action
from harness.speculation.prediction.latency import KIND_SECONDS, modelled_latency

CALIBRATION = {  # run in the directory that holds the `sympy` package (a SWE-bench repository)
    "read": "cat sympy/core/basic.py",
    "view": "sed -n 100,180p sympy/core/basic.py",
    "search": "grep -rn 'def _eval_simplify' sympy",
    "list": "find sympy/core -name '*.py'",
    "script": f"{shlex.quote(sys.executable)} -c 'import sympy; print(sympy.sqrt(8))'",
    "test": f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider sympy/core/tests/test_basic.py",
}


# Median of three runs of CALIBRATION on this machine (2 cores, load ~3) in the directory holding sympy 1.x;
# kinds not measured keep the trace-derived seconds.
LOCAL_SECONDS = {**KIND_SECONDS, "read": 0.012, "view": 0.009, "search": 0.376, "list": 0.011, "script": 0.817,
                 "test": 6.56}
TABLES = {"trace": KIND_SECONDS, "local": LOCAL_SECONDS}


def tool_seconds(action: Action, recorded: float = 0.0, table: str = "trace") -> tuple[float, bool]:
    """(seconds, measured): the recorded duration when there is one, else the kind's seconds in `table`."""
    if recorded > 0:
        return recorded, True
    if table == "trace":
        return modelled_latency(action), False
    return TABLES[table].get(action.kind, 0.2), False


def calibrate(repo: Path, runs: int = 3, commands: dict[str, str] | None = None) -> dict[str, float]:
    """Median wall seconds of each calibration command, run `runs` times in `repo`."""
    medians: dict[str, float] = {}
    for kind, command in (commands or CALIBRATION).items():
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run(command, shell=True, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False)
            times.append(time.perf_counter() - started)
        medians[kind] = round(statistics.median(times), 4)
    return medians


def main(argv: list[str] | None = None) -> int:
    """Print the calibration of this machine beside the model."""
    args = sys.argv[1:] if argv is None else argv
    repo = Path(args[0] if args else ".")
    for kind, seconds in calibrate(repo).items():
        print(f"{kind:8}{seconds:9.3f} s measured   {KIND_SECONDS.get(kind, 0.0):6.2f} s model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
