"""`tao sandbox check` and `tao sandbox run`: which overlay backend works here, and a command run in a
throwaway overlay with what it would have changed."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.machine import machine
from harness.shutdown import terminate_as_interrupt
from sandbox import SPECULATIVE, Overlay, SandboxError, Workspace
from sandbox.backends import ORDER, unavailable
from sandbox.cleanup import sweep
from sandbox.probe import detect
from sandbox.statedir import choose_base
from sandbox.timing import make_repo, measure_median

CHECK_FILES = 100  # size of the scratch repository `check` measures on when no --repo is given


async def check_report(repo: Path | None, repeat: int) -> dict[str, Any]:
    """Detect the backends, then time each one that works on `repo` (or a scratch repository)."""
    removed = sweep()
    with tempfile.TemporaryDirectory(prefix="tao-sandbox-check-") as tmp:
        root = repo if repo is not None else make_repo(Path(tmp) / "repo", CHECK_FILES)
        workspace = Workspace(root)
        base = choose_base(workspace.root)
        t0 = time.perf_counter()
        caps = await detect(base)
        probe_ms = round((time.perf_counter() - t0) * 1000, 1)
        rows: list[dict[str, Any]] = []
        for name in ORDER:
            reason = unavailable(name, caps, workspace.root)
            row: dict[str, Any] = {"name": name, "available": reason is None, "reason": reason}
            if reason is None:
                try:
                    row.update(await measure_median(workspace, name, repeat))
                except (SandboxError, OSError, RuntimeError) as exc:
                    row.update(available=False, reason=f"detected, but a trial run failed: {exc}")
            rows.append(row)
        workspace.close()
    working = [r for r in rows if r["available"]]
    best = working[0] if working else {}
    return {
        "backend": best.get("name"),
        "create_ms": best.get("create_ms"),
        "run_ms": best.get("run_ms"),
        "discard_ms": best.get("discard_ms"),
        "same_path": caps.mountns,
        "probe_ms": probe_ms,
        "repo": str(repo) if repo is not None else f"scratch git repository of {CHECK_FILES} files",
        "backends": rows,
        "capabilities": caps.to_dict(),
        "leftovers_removed": [str(x.path) for x in removed],
        "machine": machine(),
    }


def print_check(report: dict[str, Any]) -> None:
    """The check report for people."""
    caps = report["capabilities"]
    best = report["backend"]
    print(f"backend: {best or 'none works here'}" + (f"  (create {report['create_ms']} ms, first run "
          f"{report['run_ms']} ms, discard {report['discard_ms']} ms)" if best else ""))
    print(f"measured on: {report['repo']}")
    print(f"same path as the workspace: {'yes' if report['same_path'] else 'no (no mount namespace)'}")
    mode = {None: "none", True: "user namespace (unshare -Urm)", False: "root (unshare -m)"}[caps["user_namespace"]]
    command = {"userns": "in its own user namespace", "caps": "with its capabilities cut to the file powers"}
    world = {"overlay": "the real one under throwaway layers", "readonly": "the real one, read-only"}
    print(f"namespaces: {mode}; network isolated: {caps['network_namespace']}; pid namespace: "
          f"{caps['pid_namespace']}")
    if caps["mount_namespace"]:
        print(f"the command runs {command[caps['command_confinement']]}; the rest of the file system is "
              f"{world[caps['world']]}")
    print(f"overlay state: {caps['state_dir']}")
    for taint in caps["taints"]:
        print(f"every run here is tainted (never promoted): {taint}")
    print()
    for row in report["backends"]:
        if row["available"]:
            print(f"  ok   {row['name']:<15} create {row['create_ms']:>7.1f} ms  run {row['run_ms']:>7.1f} ms  "
                  f"discard {row['discard_ms']:>7.1f} ms")
        else:
            print(f"  --   {row['name']:<15} {row['reason']}")
    for key, note in caps["notes"].items():
        if key not in ORDER:
            print(f"note: {key}: {note}")
    if report["leftovers_removed"]:
        print(f"removed {len(report['leftovers_removed'])} overlay(s) left by crashed processes")


def cmd_check(args: argparse.Namespace) -> int:
    """`tao sandbox check [--json] [--repo DIR]`."""
    repo = Path(args.repo).resolve() if args.repo else None
    if repo is not None and not repo.is_dir():
        print(f"tao sandbox check: --repo {args.repo} is not a directory; pass an existing repository",
              file=sys.stderr)
        return 2
    report = asyncio.run(check_report(repo, args.repeat))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_check(report)
    return 0 if report["backend"] else 1


async def run_report(repo: Path, command: list[str], args: argparse.Namespace) -> tuple[dict[str, Any], bytes]:
    """Run `command` in a throwaway overlay of `repo`; the report and the raw output."""
    limits = replace(SPECULATIVE, network=args.net, timeout=args.timeout)
    workspace = Workspace(repo)
    async with Overlay(workspace, backend=args.backend, limits=limits) as overlay:
        result = await overlay.run(command)
        changes = overlay.changes()
        report = {
            "command": command,
            "backend": overlay.backend,
            "root": str(overlay.root),
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "output": result.text,
            "dropped_bytes": result.dropped_bytes,
            "changes": [c.to_dict() for c in changes],
            "isolation": overlay.isolation,
            "taints": overlay.taints(),
        }
    workspace.close()
    return report, result.output


def print_changes(report: dict[str, Any]) -> None:
    """What the run would have changed, for people (on stderr, so stdout is the command's own)."""
    changes = [c for c in report["changes"] if c["kind"] != "touched"]
    touched = len(report["changes"]) - len(changes)
    out = sys.stderr
    print(f"\n--- {report['backend']} overlay discarded; the command would have changed "
          f"{len(changes)} path(s){f' (and touched {touched} without changing them)' if touched else ''}:",
          file=out)
    for c in changes:
        print(f"  {c['kind']:<9} {c['type']:<8} {c['path']}", file=out)
    if report["timed_out"]:
        print("--- timed out; the process group was killed", file=out)
    for taint in report["taints"]:
        print(f"--- tainted: {taint}", file=out)
    if not report["taints"]:
        print("--- not tainted: nothing seen that a real run would have met differently", file=out)


def cmd_run(args: argparse.Namespace) -> int:
    """`tao sandbox run [--repo DIR] -- COMMAND...`."""
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("tao sandbox run: give a command after --, e.g. tao sandbox run -- pytest -q", file=sys.stderr)
        return 2
    repo = Path(args.repo or ".").resolve()
    if not repo.is_dir():
        print(f"tao sandbox run: --repo {args.repo} is not a directory", file=sys.stderr)
        return 2
    try:
        report, output = asyncio.run(run_report(repo, command, args))
    except (SandboxError, OSError) as exc:
        print(f"tao sandbox run: {exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.buffer.write(output)
        sys.stdout.flush()
        print_changes(report)
    if report["timed_out"]:
        return 124
    code = report["exit_code"]
    return code if isinstance(code, int) and code >= 0 else 128 + abs(code or 0)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `sandbox` with `check` and `run` to the `tao` command."""
    parser = subparsers.add_parser("sandbox", help="copy-on-write overlays: check what works, run a command in one",
                                   description=__doc__)
    sub = parser.add_subparsers(dest="sandbox_command", required=True)

    check = sub.add_parser("check", help="which overlay backend works here and what each costs")
    check.add_argument("--json", action="store_true", help="print JSON (keys include backend, create_ms)")
    check.add_argument("--repo", help="measure on this repository (default: a scratch git repo of 100 files)")
    check.add_argument("--repeat", type=int, default=3, help="rounds per backend; the median is shown (default 3)")
    check.set_defaults(func=cmd_check)

    run = sub.add_parser("run", help="run a command in a throwaway overlay; show its output and what it "
                                     "would have changed",
                         usage="tao sandbox run [--repo DIR] [--backend B] [--timeout S] [--net] [--json] "
                               "-- COMMAND...")
    run.add_argument("--repo", help="the workspace (default: the current directory)")
    run.add_argument("--backend", choices=ORDER, help="force a backend (default: the best that works)")
    run.add_argument("--timeout", type=float, default=600.0, help="wall-clock seconds (default 600)")
    run.add_argument("--net", action="store_true", help="keep the network (default: loopback only)")
    run.add_argument("--json", action="store_true", help="print a JSON report instead of the output")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command, after --")
    run.set_defaults(func=cmd_run)


def main(argv: list[str] | None = None) -> int:
    """Run without the `tao` CLI: python -m harness.cli_sandbox check|run ..."""
    parser = argparse.ArgumentParser(prog="tao")
    register(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["sandbox", *(sys.argv[1:] if argv is None else argv)])
    terminate_as_interrupt()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
