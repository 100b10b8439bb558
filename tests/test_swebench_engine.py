"""`tao swebench`'s batch on the real vLLM engine (embedded model): two instances, two workers, one
shared engine through the co-scheduler, a few short turns each, graded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.coscheduler import Pacing
from harness.events import LLMEnd, SessionEnd, read_trajectory
from harness.session import SessionConfig
from harness.swebench.batch import Batch, BatchConfig
from harness.swebench.instances import load_instances
from tests.test_swebench import EVAL
from tests.test_swebench_data import IDS, make_dataset

pytestmark = pytest.mark.engine


async def test_two_instances_share_the_real_engine(vllm_engine: object, tmp_path: Path) -> None:
    repos, instances_file, _ = make_dataset(tmp_path)
    instances = [i for i in load_instances(instances_file) if i.instance_id in IDS[:2]]
    config = BatchConfig(output=tmp_path / "out", repos=repos, workers=2, evaluate=True,
                         session=SessionConfig(max_steps=2, max_seconds=120, max_tokens=48),
                         eval_command=EVAL, eval_timeout=60)
    batch = Batch(instances, vllm_engine, config, Pacing(knee=2, kv_tokens=46_000, max_wait=30.0))
    summary = await batch.run()

    assert summary["done"] == 2 and summary["evaluated"] == 2 and summary["policy"] == "pacing"
    preds = [json.loads(line) for line in (tmp_path / "out" / "preds.jsonl").read_text().splitlines()]
    assert [p["instance_id"] for p in preds] == list(IDS[:2])
    for iid in IDS[:2]:
        events = read_trajectory(tmp_path / "out" / "instances" / iid / "trajectory.jsonl")
        answers = [e for e in events if isinstance(e, LLMEnd)]
        assert answers and all(a.output_tokens > 0 for a in answers)  # the model really answered
        end = events[-1]
        assert isinstance(end, SessionEnd) and end.status in ("finished", "limit")
        report = json.loads((tmp_path / "out" / "instances" / iid / "report.json").read_text())[iid]
        assert report["patch_exists"] == bool(end.submission.strip())
    sessions = {r.session_id for r in batch.cosched.records if r.action == "admit"}
    assert sessions == set(IDS[:2])  # both sessions' requests went through the one co-scheduler
