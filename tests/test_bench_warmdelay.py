"""`tao bench warm-delay`'s arithmetic and its step's messages (the engine run itself is a benchmark)."""

from __future__ import annotations

from harness import protocol
from harness.bench import warmdelay


def row(case: str, mode: str, ttft: float | None, cached: int = 100) -> dict:
    return {"case": case, "mode": mode, "ttft": ttft, "prompt": 200, "cached": cached, "warmed_at_settle": None}


def test_summary_means_and_ratios_to_no_warming() -> None:
    rows = [row("wrong", "none", 1.0), row("wrong", "none", 2.0), row("wrong", "whole", 6.0),
            row("wrong", "chunked", 1.8, 150), row("right", "none", 8.0), row("right", "chunked", 6.0),
            row("right", "whole", None)]  # a run that produced no token is left out, not counted as zero
    cases = warmdelay.summarize(rows)
    assert cases["wrong"]["none"]["ttft_mean"] == 1.5 and cases["wrong"]["none"]["ttft_max"] == 2.0
    assert cases["wrong"]["whole"]["ratio_to_none"] == 4.0
    assert cases["wrong"]["chunked"]["ratio_to_none"] == 1.2 and cases["wrong"]["chunked"]["cached_mean"] == 150
    assert cases["right"]["chunked"]["ratio_to_none"] == 0.75
    assert cases["right"]["whole"] == {"runs": 0, "ttft_mean": None, "ttft_max": None, "cached_mean": None,
                                       "prompt": None, "ratio_to_none": None}
    result = {"cases": cases, "config": {"tool_s": 1.0, "chunk_tokens": 256, "repeat": 1, "seconds": 3.0},
              "machine": {"cores": 2, "cpu": "cpu", "python": "3.11", "load": [1.0], "load_after": [1.0]}}
    lines = warmdelay.report(result).text().splitlines()
    assert any(line.split()[:3] == ["wrong", "whole", "6.00"] and "4.000" in line for line in lines)


def test_the_guess_is_a_long_failure_and_the_runs_share_only_the_system_prompt() -> None:
    assert warmdelay.GUESS.count("FAILED") == 7 and len(warmdelay.GUESS) > 3 * len(warmdelay.PASSED)
    first, second = warmdelay.history(12345678), warmdelay.history(87654321)
    assert first[0] == second[0] and first[1] != second[1]  # each run's own nonce right after the system prompt
    parser = protocol.CallParser(id_prefix="call")
    list(parser.feed(first[2]["content"]))
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.calls] == [(warmdelay.CALL.name, warmdelay.CALL.arguments)]
