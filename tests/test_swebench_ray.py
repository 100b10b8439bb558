"""`tao swebench --ray` on a real local Ray cluster of two workers (the demo dataset, the replay engine): the
same predictions as the single-process run, and a worker killed mid-batch loses no finished instance while
the instance it ran is marked and run again. With several engine endpoints (`--engine-url`, real gateways over
simulated engines on 127.0.0.1), the workers' sessions reach them, each session sticking to one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.coscheduler import FCFS, CoScheduler
from harness.engine.sim import Profile, SimEngine, StepModel
from harness.errors import UsageError
from harness.gateway import serving
from harness.swebench import cluster
from harness.swebench.demo_dataset import make_demo
from tests.helpers import ROOT

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'tao-agent[ray]'")

COUNT = 4
SIM = Profile("flat", StepModel(0.002, 0.0, 0.0, 0.0, 0.0), kv_tokens=400_000, max_model_len=100_000,
              chars_per_token=4.0)  # a quick simulated engine with room for the agent's prompts
STARTED = re.compile(r"^(\S+): started on \S+ pid (\d+)$")


def tao_swebench(root: Path, out: str, *extra: str, scripts: str = "scripts") -> list[str]:
    """`tao swebench` on the demo under root with the replay engine, as a user would type it."""
    return [sys.executable, "-m", "harness.cli", "swebench", "--instances", str(root / "instances.jsonl"),
            "--repos", str(root / "repos"), "--output", str(root / out), "--engine", "replay",
            "--replay", str(root / scripts), "--workers", "2", "--no-speculation", *extra]  # fewer test runs: CPU


def predictions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def kill_a_ray_worker(proc: subprocess.Popen[str], out: Path) -> tuple[str, str, list[str]]:
    """Once one instance has finished, SIGKILL the Ray worker process of the instance that started last.
    Returns the finished instance, its result.json and the killed one, and the stderr lines read so far."""
    assert proc.stderr is not None
    lines: list[str] = []
    running: dict[str, int] = {}
    finished = ""
    for line in proc.stderr:
        lines.append(line)
        if match := STARTED.match(line.strip()):
            running[match[1]] = int(match[2])
            if finished:
                break
        elif line.startswith("[1/"):
            finished = line.split()[1].rstrip(":")
            running.pop(finished, None)
    assert finished and running, "".join(lines)
    victim, pid = list(running.items())[-1]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"ray::" in cmdline or b"default_worker" in cmdline, cmdline  # our cluster's worker, nothing else
    os.kill(pid, signal.SIGKILL)
    return finished, (out / "instances" / finished / "result.json").read_text(), [*lines, victim]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The demo run once in one process and once on Ray with a worker killed mid-batch, both at once (the one
    process runs while the cluster starts)."""
    root = tmp_path_factory.mktemp("ray")
    make_demo(root, COUNT)
    with open(root / "single.err", "w+") as err:
        single = subprocess.Popen(tao_swebench(root, "single"), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        # turns slow enough (seconds an instance) that the kill lands while an instance runs
        proc = subprocess.Popen(tao_swebench(root, "ray", "--ray", "--seconds-per-token", "0.005"), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            finished, kept, lines = kill_a_ray_worker(proc, root / "ray")
            _, rest = proc.communicate(timeout=600)
            single.wait(timeout=600)
        finally:
            for child in (proc, single):
                if child.poll() is None:  # a failure above: let the driver shut its cluster down
                    child.send_signal(signal.SIGINT)
                    try:
                        child.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        child.kill()
        err.seek(0)
        assert single.returncode == 0, err.read()
    assert proc.returncode == 0, "".join(lines[:-1]) + rest
    return root, {"finished": finished, "kept": kept, "killed": lines[-1], "stderr": "".join(lines[:-1]) + rest}


def test_a_two_worker_ray_run_predicts_what_one_process_does(runs: tuple[Path, dict]) -> None:
    root, run = runs
    single, ray = predictions(root / "single" / "preds.jsonl"), predictions(root / "ray" / "preds.jsonl")
    assert ray == single and len(ray) == COUNT
    assert all("return a + b" in p["model_patch"] for p in ray)
    summary = json.loads((root / "ray" / "summary.json").read_text())
    assert summary["done"] == COUNT and summary["status"] == {"finished": COUNT}
    for iid in (p["instance_id"] for p in ray):
        assert (root / "ray" / "instances" / iid / "trajectory.jsonl").stat().st_size > 0
    assert f"{COUNT}/{COUNT} done" in run["stderr"]


def test_a_killed_worker_loses_no_finished_instance_and_its_instance_runs_again(runs: tuple[Path, dict]) -> None:
    root, run = runs
    out = root / "ray" / "instances"
    assert (out / run["finished"] / "result.json").read_text() == run["kept"]  # not run again, not rewritten
    killed = json.loads((out / run["killed"] / "result.json").read_text())
    assert killed["status"] == "finished" and len(killed["lost"]) == 1
    assert "Ray worker died" in killed["lost"][0]
    assert f"{run['killed']} lost" in run["stderr"] and "running it again" in run["stderr"]
    others = [json.loads((out / p["instance_id"] / "result.json").read_text())
              for p in predictions(root / "ray" / "preds.jsonl") if p["instance_id"] != run["killed"]]
    assert not any("lost" in r for r in others)


def test_a_rerun_on_ray_keeps_every_finished_instance(runs: tuple[Path, dict]) -> None:
    root, _ = runs
    results = sorted((root / "ray" / "instances").glob("*/result.json"))
    before = [path.read_text() for path in results]
    (root / "none").mkdir()  # a rerun that ran any session again would fail for want of its script
    again = subprocess.run(tao_swebench(root, "ray", "--ray", scripts="none"), cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "started on" not in again.stderr and [path.read_text() for path in results] == before
    assert predictions(root / "ray" / "preds.jsonl") == predictions(root / "single" / "preds.jsonl")


@pytest.fixture(scope="module")
def replicas() -> Iterator[tuple[list[CoScheduler], list[str]]]:
    """Two `tao serve` gateways, each over its own simulated engine, on 127.0.0.1 (served from a thread of the test
    process while `tao swebench` runs as a subprocess); yields their co-schedulers and URLs."""
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def serve() -> None:
        try:
            coscheds = [CoScheduler(SimEngine(SIM), FCFS()) for _ in range(2)]
            async with contextlib.AsyncExitStack() as stack:
                urls = [await stack.enter_async_context(serving(cosched, "m")) for cosched in coscheds]
                box.update(coscheds=coscheds, urls=urls, loop=asyncio.get_running_loop(), stop=asyncio.Event())
                ready.set()
                await box["stop"].wait()
        finally:
            ready.set()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    ready.wait(120)
    assert "urls" in box, "the test gateways did not start"
    try:
        yield box["coscheds"], box["urls"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)


def test_ray_sessions_reach_several_engine_urls_each_sticking_to_one(
        tmp_path: Path, replicas: tuple[list[CoScheduler], list[str]]) -> None:
    coscheds, urls = replicas
    make_demo(tmp_path, COUNT)
    argv = [sys.executable, "-m", "harness.cli", "swebench", "--instances", str(tmp_path / "instances.jsonl"),
            "--repos", str(tmp_path / "repos"), "--output", str(tmp_path / "out"), "--workers", "2", "--ray",
            "--engine-url", urls[0], "--engine-url", urls[1], "--max-steps", "2", "--max-tokens", "8",
            "--no-speculation"]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["done"] == COUNT and "error" not in summary["status"], summary
    held = [{r.session_id for r in cosched.records if r.action == "arrive"} for cosched in coscheds]
    assert all(held) and not held[0] & held[1], held  # both replicas used, no session on both
    starts = [json.loads(line) for path in (tmp_path / "out" / "instances").glob("*/trajectory.jsonl")
              for line in path.read_text().splitlines() if '"session_start"' in line]
    assert sorted(s["session_id"] for s in starts) == sorted(held[0] | held[1])  # every session, and only them
    for start in starts:  # each trajectory names the replica that held its session
        assert start["engine"].endswith(f" at {urls[0 if start['session_id'] in held[0] else 1]}"), start


def test_ray_refuses_an_engine_each_worker_would_start(tmp_path: Path) -> None:
    make_demo(tmp_path, 1)
    argv = tao_swebench(tmp_path, "out", "--ray")
    argv[argv.index("replay")] = "vllm"  # --engine vllm: an in-process engine per worker
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--engine openai --base-url" in result.stderr


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as when it is not installed
    with pytest.raises(UsageError, match=r"pip install 'tao-agent\[ray\]'"):
        cluster.import_ray()
