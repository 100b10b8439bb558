"""`tao bench`: the benchmarks by name, each module imported only when its benchmark runs.

Benchmarks are a leaf: the product never imports `harness.bench`. This table names each benchmark's module
and its one-line help (what `tao bench --help` lists); the module's `register(bench_subparsers)` adds its
parser, with its options, only once the command line has chosen it.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

# name -> (the module whose register() adds it, the line `tao bench --help` shows)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "engine": ("harness.bench.engine",
               "engine start, TTFT cold and cached, decode tokens/s (embedded model, in-process)"),
    "live": ("harness.bench.live", "recorded sessions against real repositories: speculation off, on and oracle"),
    "cosched": ("harness.bench.cosched",
                "many recorded sessions against one engine: fcfs, speculation, speculation + co-scheduler"),
    "replicas": ("harness.bench.replicas",
                 "sessions over 1 to 8 simulated engine replicas: session affinity against round robin and random"),
    "drafts": ("harness.bench.drafts",
               "token-level speculation: decode speed with n-gram drafts off and on, on recorded sessions' prompts"),
    "parallel": ("harness.bench.parallel",
                 "recorded turns of several reads: their time side by side against the slowest and the sum apart"),
    "calibrate": ("harness.bench.calibrate", "fit the simulated engine's step time to the real vLLM engine here"),
    "cosched-plot": ("harness.bench.cosched_plot", "plot `tao bench cosched --json` results as a PNG"),
    "cosched-error": ("harness.bench.cosched_error",
                      "the simulator's error against the real engine, from two `tao bench cosched --json` results"),
    "fidelity": ("harness.bench.fidelity",
                 "promoted speculation against the real run, byte for byte, over generated cases"),
    "first-call": ("harness.bench.first_call", "seconds from `tao` in a repository to the model's first tool call"),
    "fuzz-streams": ("harness.bench.fuzz_streams",
                     "hostile model answers through the call parser: 0 crashes expected"),
    "fuzz-traces": ("harness.bench.fuzz_traces",
                    "damaged trajectory files of every format: importing, learning and resuming never crash"),
    "replay": ("harness.bench.replay.main",
               "real trajectories on a timeline: serial, Tao, each mechanism alone, the oracle"),
    "sandbox": ("harness.bench.sandbox", "overlay create+destroy time against repository size, per backend"),
    "warm-delay": ("harness.bench.warmdelay",
                   "real engine: how long the next request waits behind a warm prefill, chunked or whole"),
    "predict": ("harness.bench.predict", "accuracy and latency coverage of the pattern analyzer"),
}


class LazySubcommands(argparse._SubParsersAction):
    """Subcommands listed with their help at once, whose parsers a module adds only when one is chosen."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules: dict[str, str] = {}  # a subcommand not loaded yet -> the module that registers it

    def add_lazy(self, name: str, module: str, help: str) -> None:
        """List `name` with `help`; `module`'s register(self) replaces the placeholder when `name` is chosen."""
        self.modules[name] = module
        self.add_parser(name, help=help, add_help=False)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if (module := self.modules.pop(values[0], None)) is not None:
            # The placeholder: the module adds the real parser (its help line stays).
            del self._name_parser_map[values[0]]
            importlib.import_module(module).register(self)
        super().__call__(parser, namespace, values, option_string)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tao bench` and every benchmark in BENCHMARKS, none of them imported yet."""
    bench = subparsers.add_parser("bench", help="measure Tao on this machine (JSON and a table)")
    benchmarks = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK", action=LazySubcommands)
    for name, (module, help) in BENCHMARKS.items():
        benchmarks.add_lazy(name, module, help)
