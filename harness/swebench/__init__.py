"""SWE-bench-style batch evaluation: many instances, one shared engine, official-format predictions.

    instances.py   load and check instances (SWE-bench's JSONL fields)
    worktrees.py   a git worktree per instance at its base commit, from local clones
    scripted.py    a shared engine that replays one turn script per instance (tests, benchmarks)
    batch.py       the runner: N workers, one co-scheduled engine, resume, atomic per-instance outputs
    evaluate.py    without Docker: apply test_patch, run FAIL_TO_PASS and PASS_TO_PASS in a worktree
    official.py    the official swebench package grades those runs: log parsers, reports
    progress.py    the live progress table
    command.py     `tao swebench`
"""
