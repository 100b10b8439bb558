"""SWE-bench instances: load a JSONL (or JSON list) file in SWE-bench's fields and check every row."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS",
            "test_patch")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

TASK_TEMPLATE = """\
You are working in a checkout of the repository {repo}. Resolve the issue below by editing the \
repository's source files. Do not edit the tests; they will be checked with tests of their own.
When you are done, call finish with a short summary of the change.

<issue>
{problem_statement}
</issue>
"""


@dataclass(frozen=True)
class Instance:
    """One task: an issue in a repository at a commit, and the tests that tell whether it is resolved."""

    instance_id: str
    repo: str  # owner/name, as on GitHub
    base_commit: str
    problem_statement: str
    fail_to_pass: list[str]  # test ids that fail before the fix and must pass after it
    pass_to_pass: list[str]  # test ids that pass before and must still pass
    test_patch: str
    environment_setup_commit: str | None = None
    hints_text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # other fields, kept as they were

    @property
    def task(self) -> str:
        """What the agent is asked to do."""
        return TASK_TEMPLATE.format(repo=self.repo, problem_statement=self.problem_statement.strip())


def _test_list(value: Any, name: str, where: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS: a list of strings, or (as on the Hugging Face hub) a JSON string of one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(f"{where}: {name} is a string but not a JSON list of test ids") from None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise UsageError(f"{where}: {name} must be a list of test ids (strings)")
    return value


def parse_instance(row: Any, where: str) -> Instance:
    """One row, checked; UsageError says which field is wrong."""
    if not isinstance(row, dict):
        raise UsageError(f"{where}: expected a JSON object with the fields {', '.join(REQUIRED)}")
    missing = [name for name in REQUIRED if name not in row]
    if missing:
        raise UsageError(f"{where}: missing field(s) {', '.join(missing)}")
    for name in ("instance_id", "repo", "base_commit", "problem_statement", "test_patch"):
        if not isinstance(row[name], str):
            raise UsageError(f"{where}: {name} must be a string")
    if not _SAFE_ID.match(row["instance_id"]):
        raise UsageError(f"{where}: instance_id {row['instance_id']!r} may hold only letters, digits, '.', '_' "
                         "and '-' (it names folders)")
    known = {*REQUIRED, "environment_setup_commit", "hints_text"}
    return Instance(
        instance_id=row["instance_id"], repo=row["repo"], base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        fail_to_pass=_test_list(row["FAIL_TO_PASS"], "FAIL_TO_PASS", where),
        pass_to_pass=_test_list(row["PASS_TO_PASS"], "PASS_TO_PASS", where),
        test_patch=row["test_patch"], environment_setup_commit=row.get("environment_setup_commit") or None,
        hints_text=row.get("hints_text") or "", extra={k: v for k, v in row.items() if k not in known})


def load_instances(path: Path) -> list[Instance]:
    """Every instance of a .jsonl file (one object a line) or a .json list; UsageError on bad input."""
    if not path.is_file():
        raise UsageError(f"--instances {path} does not exist; give a .jsonl file of SWE-bench instances")
    text = path.read_text(encoding="utf-8")
    rows: list[tuple[Any, str]] = []
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not valid JSON: {exc}") from None
        rows = [(row, f"{path}[{i}]") for i, row in enumerate(data if isinstance(data, list) else [data])]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((json.loads(line), f"{path}:{number}"))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}:{number} is not valid JSON: {exc}") from None
    instances = [parse_instance(row, where) for row, where in rows]
    seen: set[str] = set()
    for instance in instances:
        if instance.instance_id in seen:
            raise UsageError(f"{path}: instance_id {instance.instance_id} appears twice; ids must be unique")
        seen.add(instance.instance_id)
    if not instances:
        raise UsageError(f"{path} holds no instances")
    return instances
