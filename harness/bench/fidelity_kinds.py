"""The generators of `tao bench fidelity`, one a kind of case, and the seeded mix of them.

    generate(seed=1, count=2000)          # a balanced mix of every kind, the same for the same seed
    generate(seed=1, count=50, only="env")
    case_by_id(seed=1, "near-miss-0042")  # any case again, alone

Case `<kind>-<n>` depends only on the seed, its kind and n (its own `random.Random`), so a failing case
is reproduced by its id whatever the size of the run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from harness.bench.fidelity_cases import (WORDS, Case, Outside, Tree, case, edited_late, history, json_call, project,
                                          pure_call, q, run_output, test_command, text_lines, with_repeat)

KINDS = ("valid", "near-miss", "invalid", "env", "tree", "hostile")


def valid(rng: random.Random, cid: str) -> Case:
    """A pure call or a test run, the candidate equal to the real call (or a whole read serving a range)."""
    tree = project(rng)
    steps = history(rng, tree)
    if rng.random() < 0.4:
        call = json_call("run_tests", {"command": test_command(rng, tree)})
        return case(cid, "valid", "tests", tree, with_repeat(rng, steps, call), call, rng=rng)
    label, call = pure_call(rng, tree)
    if label == "read-range" and rng.random() < 0.5:
        whole = json_call("read_file", {"path": call.arguments["path"]})
        late_steps, late = edited_late(rng, tree, tuple(steps), call)
        return case(cid, "valid", "slice", tree, late_steps, whole, call, rng, late=late)
    late_steps, late = edited_late(rng, tree, with_repeat(rng, steps, call), call)
    return case(cid, "valid", label, tree, late_steps, call, rng=rng, late=late)


def _spaced(rng: random.Random, command: str) -> tuple[str, str]:
    """A command and the same words spaced differently (outside quotes, inside quotes, or at the end)."""
    how = rng.randrange(3)
    if how == 0:
        return command, command.replace(" ", "  ", 1)
    if how == 1:
        return command + " ", command
    text = rng.choice(WORDS)
    return f"echo '{text} {text}'", f"echo '{text}  {text}'"


def near_miss(rng: random.Random, cid: str) -> Case:
    """The real call differs slightly from the candidate: spelling, types, ranges, extra arguments."""
    tree = project(rng)
    tree.add("ws/sub", "symlink", "other/deep")
    steps = history(rng, tree, rng.randint(0, 1))
    path = rng.choice(["a.py", "x.py", "data.txt", "pkg/mod.py"])
    total = tree.files[path].count("\n")
    whole, read = {"path": path}, "read_file"
    menu: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
        ("padded-path", whole, {"path": f" {path} "}, read), ("dot-path", whole, {"path": f"./{path}"}, read),
        ("abs-path", whole, {"path": f"%WS%/{path}"}, read),
        ("symlink-dotdot", {"path": "x.py"}, {"path": "sub/../x.py"}, read),
        ("start-zero", whole, {"path": path, "start_line": 0}, read),
        ("start-negative", whole, {"path": path, "start_line": -3}, read),
        ("start-string", whole, {"path": path, "start_line": str(rng.randint(1, 5))}, read),
        ("range-strings", {"path": path, "start_line": 1, "end_line": 2},
         {"path": path, "start_line": "1", "end_line": "2"}, read),
        ("past-end", whole, {"path": path, "start_line": total + rng.randint(1, 50)}, read),
        ("end-before-start", whole, {"path": path, "start_line": 3, "end_line": 1}, read),
        ("bool-line", whole, {"path": path, "start_line": True}, read),
        ("float-line", whole, {"path": path, "start_line": 1.0}, read),
        ("extra-arg", whole, {"path": path, "verbose": True}, read),
        ("missing-spelling", {"path": "nope.py"}, {"path": rng.choice(("./nope.py", " nope.py", "pkg/../nope.py"))},
         read),
        ("case", {"path": "a.py"}, {"path": "A.py"}, read),
        ("grep-path-int", {"pattern": "def", "path": "7"}, {"pattern": "def", "path": 7}, "grep"),
        ("grep-path-dotdot", {"pattern": "def"}, {"pattern": "def", "path": "sub/.."}, "grep"),
        ("depth-string", {"depth": 1}, {"depth": "1"}, "list_files"),
        ("list-slash", {"path": "pkg"}, {"path": "pkg/"}, "list_files"),
        ("outline-dotdot", {"path": "x.py"}, {"path": "sub/../x.py"}, "outline"),
    ]
    if rng.random() < 0.3:
        command, spaced = _spaced(rng, test_command(rng, tree))
        label, candidate, real = "spacing", json_call("run_tests", {"command": command}), \
            json_call("run_tests", {"command": spaced})
        return case(cid, "near-miss", label, tree, steps, candidate, real, rng)
    label, candidate_args, real_args, name = rng.choice(menu)
    if label == "grep-path-int":
        tree.add("ws/7", "dir", mode=0o755)
        tree.add("ws/7/seven.py", "file", "def seven():\n    return 7\n")
    return case(cid, "near-miss", label, tree, steps, json_call(name, candidate_args), json_call(name, real_args), rng)


def nested(depth: int, leaf: Any = "a.py") -> Any:
    """`leaf` inside `depth` levels of objects and arrays, as a model could send it."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def invalid(rng: random.Random, cid: str) -> Case:
    """The real call fails the schema or carries bytes no path or command can hold; the candidate is valid."""
    tree = project(rng)
    steps = history(rng, tree, rng.randint(0, 1))
    read = ("read_file", {"path": "a.py"})
    menu: list[tuple[str, tuple[str, dict[str, Any]], str, dict[str, Any]]] = [
        ("path-int", read, "read_file", {"path": 5}),
        ("path-list", read, "read_file", {"path": ["a.py"]}),
        ("path-null", read, "read_file", {"path": None}),
        ("path-missing", read, "read_file", {}),
        ("nul-path", read, "read_file", {"path": "a.py\0"}),
        ("nul-pattern", ("grep", {"pattern": "def"}), "grep", {"pattern": "def\0"}),
        ("nul-command", ("run_tests", {"command": "cat a.py"}), "run_tests", {"command": "cat a.py\0"}),
        ("control-path", read, "read_file", {"path": "a.py\x1b[2J\x07"}),
        ("control-name", read, rng.choice(("read_file\x1b", "read\nfile", "read_file\0", "\x7f")), {"path": "a.py"}),
        ("control-key", read, "read_file", {"path": "a.py", "\x07": 1}),
        ("surrogate-path", read, "read_file", {"path": "a\ud800.py"}),
        ("huge-start", read, "read_file", {"path": "a.py", "start_line": 10 ** rng.randint(19, 40)}),
        ("huge-negative", read, "read_file", {"path": "a.py", "start_line": -10 ** 30}),
        ("huge-end", ("read_file", {"path": "a.py", "start_line": 1, "end_line": 2}), "read_file",
         {"path": "a.py", "start_line": 1, "end_line": 10 ** 30}),
        ("float-inf", read, "read_file", {"path": "a.py", "start_line": float("inf")}),
        ("float-nan", read, "read_file", {"path": "a.py", "start_line": float("nan")}),
        ("float-huge", read, "read_file", {"path": "a.py", "start_line": 1e308}),
        ("depth-huge", ("list_files", {}), "list_files", {"depth": 10 ** 25}),
        ("deep-arg", read, "read_file", {"path": "a.py", "x": nested(rng.randint(50, 600))}),
        ("deep-path", read, "read_file", {"path": nested(rng.randint(50, 600))}),
        ("deep-command", ("run_tests", {"command": "true"}), "run_tests", {"command": nested(300, "true")}),
        ("long-path", read, "read_file", {"path": "a" * rng.choice((300, 5000, 100_000))}),
        ("command-int", ("run_tests", {"command": "true"}), "run_tests", {"command": 1}),
        ("pattern-null", ("grep", {"pattern": "def"}), "grep", {"pattern": None}),
        ("empty-name", read, "", {"path": "a.py"}),
    ]
    label, (name, args), real_name, real_args = rng.choice(menu)
    return case(cid, "invalid", label, tree, steps, json_call(name, args), json_call(real_name, real_args), rng)


def env(rng: random.Random, cid: str) -> Case:
    """Sandboxed runs whose result depends on the world around the workspace, or on chance."""
    tree = project(rng)
    steps = history(rng, tree, rng.randint(0, 1))
    tree.add("out/data.txt", "file", text_lines(rng, 2, 6))
    tree.add("ws/data_link.txt", "hardlink", "out/data.txt")
    tree.add("ws/h1.txt", "file", text_lines(rng, 1, 3))
    tree.add("ws/h2.txt", "hardlink", "ws/h1.txt")
    label, command = rng.choice((
        ("tmp-fixture", 'test "$(cat %TMP%-fixture)" = 42 && echo PASS || { echo FAIL; exit 1; }'),
        ("loopback", "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', %PORT%), timeout=5); "
                     "print('PASS' if s.recv(16) == b'pong\\n' else 'FAIL')\""),
        ("home-cache", "mkdir -p ~/.cache/tao-fid && echo cached > ~/.cache/tao-fid/entry && cat ~/.cache/tao-fid/*"),
        ("memory", "python3 -c \"import mmap; m = mmap.mmap(-1, 5 << 30); print('PASS')\""),
        ("hardlink-append", "echo more >> data_link.txt && cat data_link.txt"),
        ("hardlink-replace", "sed -i 's/1/one/' data_link.txt && cat data_link.txt"),
        ("hardlink-inside", "echo more >> h1.txt && cat h2.txt"),
        ("hardlink-stale", "cat data_link.txt"),
        ("hardlink-late", "cat data_link.txt"),
        ("edit-late", "cat data.txt"),
        ("tmp-write", "echo written > %TMP%-w && cat %TMP%-w"),
        ("outside-write", "echo log >> %OUT%/log.txt && echo PASS"),
        ("bash-output", "cat count.txt"),
        ("identity", "id -u; id -g; id -G; hostname; umask"),
        ("environ", "env | sort"),
        ("limits", "ulimit -f; ulimit -n; ulimit -s"),
        ("random", "python3 -c 'import uuid; print(uuid.uuid4())'"),
        ("time", "date +%s%N"),
    ))
    call = json_call("run_tests", {"command": command})
    if label == "tmp-fixture":
        steps.append(json_call("bash", {"command": "echo 42 > %TMP%-fixture"}))
    elif label == "bash-output":
        steps.append(json_call("bash", {"command": f"echo {rng.randint(0, 99)} > count.txt"}))
    elif label == "hardlink-stale":
        steps += [call, Outside("out/data.txt", "changed outside\n")]
        if rng.random() < 0.5:
            call = json_call("read_file", {"path": "data_link.txt"})
            steps[-2] = call
    late = 0
    if label in ("hardlink-late", "edit-late"):  # changed behind Tao's back after the speculation ran
        call = call if rng.random() < 0.5 else json_call("read_file", {"path": command.split()[-1]})
        steps.append(Outside("out/data.txt" if label == "hardlink-late" else "ws/data.txt", "changed outside\n"))
        late = 1
    expect = None
    if label in ("random", "time"):
        expect = run_output(command, "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}" if label == "random"
                            else "[0-9]{19}")
        if rng.random() < 0.5:
            steps.append(call)  # the same command ran before: a repeat must not answer it
    return case(cid, "env", label, tree, steps, call, rng=rng, expect=expect, late=late)


def random_tree(rng: random.Random) -> Tree:
    """A project plus random dirs and files, symlinks (inside, dangling, outside, to dirs, loops), hard links."""
    tree = project(rng)
    names = ["d1", "d1/d2", "d3", "d1/d2/d4"]
    for folder in names[:rng.randint(1, 4)]:
        tree.add(f"ws/{folder}", "dir", mode=rng.choice((0o755, 0o700)))
    for i in range(rng.randint(2, 6)):
        tree.add(f"ws/{rng.choice(tree.dirs)}/f{i}.txt".replace("/./", "/"), "file", text_lines(rng, 1, 6),
                 rng.choice((0o644, 0o600, 0o755, 0o444)))
    targets = [("l_inside", "a.py"), ("l_dir", "pkg"), ("l_dangling", "nope.txt"), ("l_out", "../out/secret.txt"),
               ("l_out_abs", "%OUT%/shared.txt"), ("l_out_dir", "%OUT%"), ("l_root", "%OUT%/.."), ("l_self", "l_self"),
               ("l_loop_a", "l_loop_b"), ("l_loop_b", "l_loop_a"), ("d1/l_up", ".."), ("l_deep", "d1/d2"),
               ("l_ws_abs", "%WS%/x.py"), ("l_chain", "l_inside")]
    for name, target in rng.sample(targets, rng.randint(2, len(targets))):
        if name.startswith("d1/") and "d1" not in tree.dirs:
            continue
        tree.add(f"ws/{name}", "symlink", target)
    if rng.random() < 0.7:
        tree.add("ws/hl_in", "hardlink", "ws/x.py")
    if rng.random() < 0.7:
        tree.add("ws/hl_out", "hardlink", "out/shared.txt")
    return tree


def tree_case(rng: random.Random, cid: str) -> Case:
    """Random valid calls over a random tree full of links."""
    tree = random_tree(rng)
    paths = sorted(set(tree.files) | set(tree.links) | set(tree.dirs) - {"."})
    path = rng.choice(paths)
    pick = rng.randrange(6)
    if pick == 0:
        label, call = "read", json_call("read_file", {"path": path})
    elif pick == 1:
        where = rng.choice(tree.dirs + tree.links)
        label, call = "list", json_call("list_files", {"path": where, "depth": rng.randint(1, 4)})
    elif pick == 2:
        pattern = rng.choice(WORDS + ("secret",))
        label, call = "grep", json_call("grep", {"pattern": pattern, "path": rng.choice([".", path])})
    else:
        p = q(path)
        label, call = "tests", json_call("run_tests", {"command": rng.choice((
            f"cat {p}", f"readlink {p}", f"stat -c '%F %h %s %a' {p}", f"echo x >> {p} && cat {p}",
            f"rm -f {p} && ls", f"sed -i 's/a/b/' {p} && cat {p}", f"cp {p} copy.txt && cat copy.txt",
            f"mv {p} moved && ls", f"ln {p} hard_new && stat -c %h {p}", f"chmod 600 {p} && stat -c %a {p}",
            f"truncate -s 0 {p} && wc -c {p}", f"ls -1 {p}", f"find {p} | sort", f"rm -rf {p} && find . | sort",
            f"test -e {p} && echo yes || echo no", f"touch {p}/new && ls {p}",
            f"chmod {rng.choice(('700', '750'))} . && stat -c %a .", "chmod 711 d1 2>&1; stat -c %a d1 2>&1"))})
    steps = history(rng, tree, rng.randint(0, 2))
    return case(cid, "tree", label, tree, with_repeat(rng, steps, call, 0.15), call, rng=rng)


HANDLE_ATTACK = """python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("type", ctypes.c_int), ("data", ctypes.c_ubyte * 128)]
handle, mount_id = Handle(128), ctypes.c_int()
if libc.name_to_handle_at(-100, b"/", ctypes.byref(handle), ctypes.byref(mount_id), 0) != 0:
    raise SystemExit("name_to_handle_at refused: errno %d" % ctypes.get_errno())
for mount in ("/tmp", "/var/tmp", "/dev/shm", "%WS%"):
    try:
        mfd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        continue
    fd = libc.open_by_handle_at(mfd, ctypes.byref(handle), os.O_RDONLY | os.O_DIRECTORY)
    if fd < 0:
        print("open_by_handle_at through", mount, "refused: errno", ctypes.get_errno())
        continue
    try:
        target = os.open("%WSREL%/a.py", os.O_WRONLY | os.O_APPEND, dir_fd=fd)
        os.write(target, b"# written through a file handle\\n")
        print("%MARK%:handle-through-" + mount)
    except OSError as exc:
        print("write through", mount, "refused:", exc.strerror)
EOF"""

FD_PROBE = """python3 - <<'EOF'
import os
for name in sorted(os.listdir("/proc/self/fd")):
    try:
        target = os.readlink("/proc/self/fd/" + name)
        if target.startswith(("%WS%", "%OUT%")):
            os.close(os.open("/proc/self/fd/" + name, os.O_WRONLY | os.O_APPEND))
            print("%MARK%:inherited-fd", target)
    except OSError:
        pass
print("probed")
EOF"""

OPEN_FOR_WRITING = ("python3 -c \"import os, sys\nfor p in sys.argv[1:]:\n    try: os.close(os.open(p, os.O_WRONLY)); "
                    "print('%MARK%:opened-for-writing', p)\n    except OSError as e: print(p, e.strerror)\" ")


def hostile(rng: random.Random, cid: str) -> Case:
    """Candidates that try to leave the sandbox; the real call matches only where running it for real is safe."""
    tree = project(rng)
    steps = history(rng, tree, rng.randint(0, 1))
    safe = (  # harmless when the real call runs it for real: it touches the case's own files only
        ("dotdot-write", "echo pwned >> ../out/secret.txt; cat ../out/secret.txt"),
        ("abs-write", "echo pwned >> %OUT%/secret.txt && echo done"),
        ("proc-root-write", "echo pwned >> /proc/self/root%OUT%/secret.txt && echo done"),
        ("proc1-root-write", "echo pwned >> /proc/1/root%OUT%/secret.txt && echo done"),
        ("symlink-root", "ln -s / r && echo pwned >> r%OUT%/secret.txt && echo done"),
        ("cwd-dotdot", "cd .. && echo pwned >> out/secret.txt && echo done"),
        ("handle", HANDLE_ATTACK), ("inherited-fd", FD_PROBE),
    )
    unsafe = (  # run only speculatively: a real run as root would touch the machine
        # Writes are judged by the trees, not by what the command says: a sandbox may let them land in a
        # throwaway layer. Only powers that leave no trace (opening for writing, a device node) print the mark.
        ("state-dir-write", "echo pwned > %STATE%/%TOKEN%-pwn 2>&1; echo done"),
        ("umount", "umount -l %WS% 2>&1; echo pwned >> %WS%/a.py 2>&1; echo done"),
        ("remount", "mount -o remount,rw / 2>&1; echo pwned >> %OUT%/secret.txt 2>&1; echo done"),
        ("proc-sys", OPEN_FOR_WRITING + "/proc/sys/kernel/core_pattern /proc/sysrq-trigger"),
        ("sys", OPEN_FOR_WRITING + "/sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/uevent_helper"),
        ("mknod", "mknod ./blk b 7 0 2>&1 && echo %MARK%:mknod; rm -f ./blk"),
    )
    if rng.random() < 0.55:
        label, command = rng.choice(safe)
        real = json_call("run_tests", {"command": command}) if rng.random() < 0.5 else \
            json_call("run_tests", {"command": "cat a.py"})
    else:
        label, command = rng.choice(unsafe)
        real = json_call(*rng.choice((("run_tests", {"command": "cat a.py"}), ("read_file", {"path": "a.py"}))))
    return case(cid, "hostile", label, tree, steps, json_call("run_tests", {"command": command}), real, rng)


GENERATORS: dict[str, Callable[[random.Random, str], Case]] = {
    "valid": valid, "near-miss": near_miss, "invalid": invalid, "env": env, "tree": tree_case, "hostile": hostile,
}


def case_by_id(seed: int, cid: str) -> Case:
    """The case `<kind>-<n>` of a seed, alone."""
    kind, _, number = cid.rpartition("-")
    if kind not in GENERATORS or not number.isdigit():
        raise ValueError(f"case id {cid!r} is not <kind>-<number> with a kind among {', '.join(KINDS)}")
    return GENERATORS[kind](random.Random(f"{seed}/{kind}/{int(number)}"), f"{kind}-{int(number):04d}")


def generate(seed: int, count: int, only: str | None = None) -> list[Case]:
    """`count` cases, the kinds taken in turn (or only `only`), each from its own seeded random.Random."""
    kinds = (only,) if only else KINDS
    return [case_by_id(seed, f"{kinds[i % len(kinds)]}-{i // len(kinds)}") for i in range(count)]
