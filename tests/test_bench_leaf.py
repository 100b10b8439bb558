"""Benchmarks are a leaf: the product never imports `harness.bench`, and `tao bench` still lists and runs them all."""

from __future__ import annotations

import subprocess
import sys

from harness.cli_bench import BENCHMARKS
from tests.helpers import ROOT

EVERY_PRODUCT_MODULE = """
import importlib, pkgutil, sys
from harness.cli import build_parser

def walk(path, prefix):  # as pkgutil.walk_packages, without importing harness.bench to look inside it
    for module in pkgutil.iter_modules(path, prefix):
        if module.name != "harness.bench":
            imported = importlib.import_module(module.name)
            if module.ispkg:
                walk(imported.__path__, module.name + ".")

for package in ("harness", "tools", "tui", "sandbox"):
    walk(importlib.import_module(package).__path__, package + ".")
build_parser().parse_args(["run", "task"])
print(sorted(name for name in sys.modules if name.startswith("harness.bench")))
"""


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_no_product_module_imports_a_benchmark() -> None:
    result = python("-c", EVERY_PRODUCT_MODULE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_bench_help_lists_every_benchmark_with_its_help() -> None:
    result = python("-m", "harness.cli", "bench", "--help")
    assert result.returncode == 0, result.stderr
    listing = " ".join(result.stdout.split())
    for name, (_, help) in BENCHMARKS.items():
        assert name in listing and " ".join(help.split()) in listing, name


def test_a_benchmarks_help_shows_its_own_options() -> None:
    live = python("-m", "harness.cli", "bench", "live", "--help")
    assert live.returncode == 0 and "usage: tao bench live" in live.stdout and "--tpot-ms" in live.stdout
    plot = python("-m", "harness.cli", "bench", "cosched-plot", "--help")
    assert plot.returncode == 0 and "usage: tao bench cosched-plot" in plot.stdout and "--out" in plot.stdout


def test_every_listed_benchmark_module_registers_that_name() -> None:
    import argparse
    import importlib

    for name, (module, _) in BENCHMARKS.items():
        parser = argparse.ArgumentParser(prog="tao bench")
        sub = parser.add_subparsers(dest="bench")
        importlib.import_module(module).register(sub)
        assert list(sub.choices) == [name], module
