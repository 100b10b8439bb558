"""`tao bench replicas`'s routing (affinity pins a session, round robin spreads its requests) and its scaling
ratios, on the simulated engine's virtual clock."""

from __future__ import annotations

from harness.bench.replicas import Router, scaling
from harness.coscheduler import FCFS, CoScheduler
from harness.engine.api import Engine, LLMRequest
from harness.engine.sim import SimEngine
from tests.helpers import flat_profile, virtual


async def send(engine: Engine, rid: str) -> None:
    async for _ in engine.stream(LLMRequest(rid, [{"role": "user", "content": "hi"}], max_tokens=1)):
        pass


def arrivals(cosched: CoScheduler) -> list[str]:
    return [r.session_id for r in cosched.records if r.action == "arrive"]


def test_affinity_pins_each_session_and_round_robin_spreads_its_requests() -> None:
    async def main() -> tuple[list[list[str]], list[list[str]]]:
        pinned = [CoScheduler(SimEngine(flat_profile(kv_tokens=10_000)), FCFS()) for _ in range(2)]
        router = Router("affinity", pinned)
        engines = {name: router.engine(name) for name in ("a", "b", "c")}
        spread = [CoScheduler(SimEngine(flat_profile(kv_tokens=10_000)), FCFS()) for _ in range(2)]
        rr = Router("round-robin", spread).engine("a")
        for step in range(3):
            for name, engine in engines.items():
                await send(engine, f"{name}-{step}")
            await send(rr, f"rr-{step}")
        return [arrivals(c) for c in pinned], [arrivals(c) for c in spread]

    pinned, spread = virtual(main)
    assert pinned == [["a", "c"] * 3, ["b"] * 3]
    assert spread == [["a", "a"], ["a"]]


def test_scaling_compares_affinity_to_linear_and_to_round_robin() -> None:
    rows = [{"replicas": 1, "mode": "affinity", "throughput_per_hour": 100.0, "mean": 10.0, "p99": 20.0},
            {"replicas": 4, "mode": "affinity", "throughput_per_hour": 380.0, "mean": 10.5, "p99": 21.0},
            {"replicas": 4, "mode": "round-robin", "throughput_per_hour": 190.0, "mean": 21.0, "p99": 63.0}]
    one, four = scaling(rows)
    assert one == {"replicas": 1, "affinity_of_linear": 1.0}
    assert four == {"replicas": 4, "affinity_of_linear": 0.95, "round-robin_mean_ratio": 2.0,
                    "round-robin_p99_ratio": 3.0, "affinity_throughput_over_round-robin": 2.0}
