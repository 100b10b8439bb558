"""The stream fuzzer at a size that fits the suite: hostile answers never make the call parser raise."""

from __future__ import annotations

import json
import random

from harness.bench import fuzz_streams
from harness.bench.stream_gen import StreamGen


def test_two_thousand_fuzzed_streams_crash_nothing() -> None:
    result = fuzz_streams.run(streams=2000, seed=21, native=500)
    assert result["crashes"] == 0 and result["violations"] == 0, fuzz_streams.table(result)
    # The run did reach what it is about: calls of every kind of damage, and the well-formed ones.
    assert result["calls"] > 1000 and result["errors"] > 500
    assert {"deep", "nan", "surrogate", "control", "huge_number", "well_formed"} <= set(result["by_mutation"])


def test_a_seed_and_a_case_number_reproduce_the_case() -> None:
    first = StreamGen(random.Random("7:text:3")).answer()
    again = StreamGen(random.Random("7:text:3")).answer()
    assert first.chunks == again.chunks and first.labels == again.labels


def test_the_benchmark_command_prints_json_and_fails_only_on_crashes(capsys) -> None:  # type: ignore[no-untyped-def]
    from harness.cli import main

    assert main(["bench", "fuzz-streams", "--streams", "60", "--seed", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["streams"] == 60 and result["crashes"] == 0 and "examples" in result
