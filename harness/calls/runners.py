"""Which commands run a project's tests or build it, in every ecosystem, and their one spelling.

A test or build run (`pytest`, `npm test`, `go test ./...`, `cargo build`, `mix test`, `./gradlew test`,
`make check`, `bundle exec rspec`, `dotnet test`, `npx tsc`) is slow, is run again after an edit, and
may write (caches, build output), so it is speculated in an overlay. `is_test_run` says whether an argv is
one; `respell` merges spellings that run the same script (`npm run test` is `npm test`, as npm runs the
`test` script with its pre and post scripts either way) and nothing else: `bun run test` runs the script
but `bun test` is bun's own runner, `npm run build` runs a script but `npm build` does not, `./gradlew` is
not `gradle`. `runner_length` says how many leading words name the runner (`go test`, `npx jest`).
"""

from __future__ import annotations

import posixpath

_PYTHON_RUNNERS = frozenset({"pytest", "py.test", "tox", "nosetests", "nox", "trial"})
_PYTHON_MODULES = frozenset({"pytest", "unittest", "nose", "tox", "doctest"})
# Programs that test or type-check whatever their arguments (`jest src/a.test.ts`, `tsc --noEmit`).
_RUNNERS = frozenset({"jest", "vitest", "mocha", "rspec", "tsc"})
# Programs whose subcommand (their first word that is not an option) says whether they test or build.
_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "go": frozenset({"test", "build", "vet"}),
    "cargo": frozenset({"test", "build", "check", "nextest"}),
    "mix": frozenset({"test", "compile"}),
    "dotnet": frozenset({"test", "build"}),
    "deno": frozenset({"test", "check"}),
    "rake": frozenset({"test", "spec"}),
    "rails": frozenset({"test"}),
}
# Build tools that take several goals or tasks (`mvn clean test`, `./gradlew :app:test`, `make -C x check`).
_GOALS: dict[str, frozenset[str]] = {
    "mvn": frozenset({"test", "verify", "compile", "test-compile", "package"}),
    "mvnw": frozenset({"test", "verify", "compile", "test-compile", "package"}),
    "gradle": frozenset({"test", "build", "check"}),
    "gradlew": frozenset({"test", "build", "check"}),
    "make": frozenset({"test", "tests", "check"}),
}
# Words that only find the program to run: `npx jest`, `bundle exec rspec`, `pnpm exec vitest`.
_LAUNCHERS = {"npx": 1, "bunx": 1, "bundle": 2, "pnpm": 2, "yarn": 2}
_PACKAGE_MANAGERS = frozenset({"npm", "pnpm", "yarn", "bun"})
_TEST_ALIASES = {"npm": {"t", "tst"}, "pnpm": {"t", "tst"}, "yarn": set[str](), "bun": set[str]()}
_SAME_SCRIPT = frozenset({"npm", "pnpm", "yarn"})  # `X run test` is `X test` (bun's `test` is its own runner)
# Options of those programs that take the next word as their value (`pnpm --filter web test`, `make -C sub`).
_VALUE_OPTIONS = frozenset({"--filter", "-F", "--prefix", "-C", "--cwd", "--dir", "-w", "--workspace", "-f",
                            "--file", "-pl", "--projects"})


def is_test_run(argv: list[str]) -> bool:
    """Whether a command (without leading `VAR=value` words) runs tests or builds the project."""
    if not argv:
        return False
    name = posixpath.basename(argv[0])
    if name in _PYTHON_RUNNERS or name == "runtests.py" or argv[0].rstrip("/").endswith("bin/test"):
        return True
    if name.startswith("python"):
        return _python_test(argv[1:])
    launched = _launched(argv)
    if launched is not None:
        return is_test_run(launched)
    if name in _RUNNERS:
        return True
    if name in _PACKAGE_MANAGERS:
        return _script(name, argv[1:]) is not None
    words = _operands(argv[1:])
    if name in _SUBCOMMANDS:
        first = next((w for w in words if not w.startswith("+")), "")  # `cargo +nightly test`
        return first in _SUBCOMMANDS[name]
    if name in _GOALS:
        return any(w.rsplit(":", 1)[-1] in _GOALS[name] or (name == "make" and w.startswith("test-")) for w in words)
    return False


def respell(argv: list[str]) -> list[str]:
    """The one spelling of a package manager's test script: `npm run test` and `npm t` are `npm test`."""
    if len(argv) >= 2 and argv[0] in _SAME_SCRIPT:
        if argv[1] in ("run", "run-script") and len(argv) >= 3 and argv[2] == "test":
            return [argv[0], "test", *argv[3:]]
        if argv[1] in _TEST_ALIASES[argv[0]]:
            return [argv[0], "test", *argv[2:]]
    return argv


def runner_length(argv: list[str]) -> int:
    """How many leading words name the runner of a test run of another ecosystem (`go test`: 2, `npx jest`: 2,
    `npm test --`: 3); 0 for Python's runners, whose own rules find their targets, and for other commands."""
    if not argv or not is_test_run(argv):
        return 0
    name = posixpath.basename(argv[0])
    if name in _PYTHON_RUNNERS or name.startswith("python") or name == "runtests.py" or argv[0].endswith("bin/test"):
        return 0
    launched = _launched(argv)
    if launched is not None:
        inner = runner_length(launched)
        return len(argv) - len(launched) + (inner or 1)
    if name in _RUNNERS:
        return 1
    length = 2 if name in _SUBCOMMANDS or name in _PACKAGE_MANAGERS else 1
    if name in _PACKAGE_MANAGERS and argv[1:2] in (["run"], ["run-script"]):
        length = 3
    return length + 1 if argv[length:length + 1] == ["--"] else length


def _python_test(args: list[str]) -> bool:
    if args[:1] == ["-m"] and len(args) > 1:
        return args[1] in _PYTHON_MODULES
    script = next((a for a in args if not a.startswith("-")), "")
    return posixpath.basename(script) == "runtests.py" or (
        posixpath.basename(script) in ("setup.py", "manage.py") and "test" in args)


def _launched(argv: list[str]) -> list[str] | None:
    """The command a launcher runs (`npx jest x` -> `jest x`), None when argv is no launcher's."""
    name = posixpath.basename(argv[0])
    words = _LAUNCHERS.get(name)
    if words is None or (words == 2 and argv[1:2] not in (["exec"], ["dlx"])):
        if name == "yarn" and len(argv) > 1 and posixpath.basename(argv[1]) in _RUNNERS:
            return argv[1:]  # `yarn jest`: yarn runs a package's binary by its name
        return None
    rest = argv[words:]
    while rest and rest[0].startswith("-"):  # `npx --yes jest`, `npx -p typescript tsc`
        rest = rest[2:] if rest[0] in ("-p", "--package") else rest[1:]
    return rest or None


def _script(manager: str, args: list[str]) -> str | None:
    """The test or build script a package manager runs (`npm run build` -> `build`), None if it runs none."""
    words = _operands(args)
    if not words:
        return None
    first = words[0]
    if first in ("run", "run-script"):
        script = words[1] if len(words) > 1 else ""
    elif first == "test" or first in _TEST_ALIASES[manager]:
        return "test"
    elif manager in ("pnpm", "yarn"):  # they run a script by its bare name; npm and bun have commands of those names
        script = first
    else:
        return None
    return script if script.split(":", 1)[0] in ("test", "build") else None


def _operands(args: list[str]) -> list[str]:
    """The words of a command that are not options or their values (up to a `--`)."""
    found, index = [], 0
    while index < len(args):
        word = args[index]
        if word == "--":
            break
        if word in _VALUE_OPTIONS:
            index += 2
            continue
        if not word.startswith("-"):
            found.append(word)
        index += 1
    return found


# How a runner of another ecosystem names a test file: the file itself, or its package (go); by language.
_TEST_FILE_SUFFIXES = {"go": ("_test.go",), "js": (".test.ts", ".test.tsx", ".test.js", ".test.jsx", ".test.mjs",
                                                  ".spec.ts", ".spec.tsx", ".spec.js", ".spec.jsx", ".spec.mjs"),
                       "ruby": ("_spec.rb", "_test.rb"), "elixir": ("_test.exs",)}
_LANGUAGE = {"go": "go", "jest": "js", "vitest": "js", "mocha": "js", "npm": "js", "pnpm": "js", "yarn": "js",
             "bun": "js", "deno": "js", "rspec": "ruby", "rake": "ruby", "rails": "ruby", "mix": "elixir"}


def is_test_file(path: str) -> bool:
    """Whether a path names a test file: a Python test module (`test_x.py`, `x_test.py`, `tests.py`) or one of
    another ecosystem's (`x_test.go`, `a.test.ts`, `a.spec.js`, `x_spec.rb`, `x_test.exs`)."""
    name = posixpath.basename(path)
    if name.endswith(".py"):
        return name.startswith("test") or name.endswith("_test.py")
    return any(name.endswith(suffix) for suffixes in _TEST_FILE_SUFFIXES.values() for suffix in suffixes)


def file_target(runner: str, path: str) -> str | None:
    """How `runner` names the test file or folder `path` (`go test` names `pkg/a_test.go` as `./pkg`), None when
    it takes no such target (a Python runner and a Go file, `cargo test`, which filters by test name)."""
    argv = runner.split()
    folder = "." not in posixpath.basename(path)
    if runner_length(argv) == 0:  # Python's runners: modules and folders
        return path if folder or path.endswith(".py") else None
    language = file_language(argv)
    if language is None or not (folder or path.endswith(_TEST_FILE_SUFFIXES[language])):
        return None
    if language == "go":
        package = path if folder else posixpath.dirname(path)
        return f"./{package}" if package else "."
    return path


def file_language(argv: list[str]) -> str | None:
    """The language of the test files a test run of another ecosystem takes as targets (`go test`: go,
    `npx jest`: js), None for runs that take none (builds, `cargo test`, `mvn test`, `make test`, `tsc`)."""
    launched = _launched(argv) if argv else None
    words = launched or argv
    if not words or not is_test_run(words):
        return None
    program = posixpath.basename(words[0])
    language = _LANGUAGE.get(program)
    if program in _PACKAGE_MANAGERS:
        return language if _script(program, words[1:]) == "test" else None
    if program in _SUBCOMMANDS:
        return language if _operands(words[1:])[:1] == ["test"] else None
    return language
