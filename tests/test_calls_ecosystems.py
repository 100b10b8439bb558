"""Calls of other agents and languages: test and build runners of every ecosystem, paths under the session's
working directory, and git reads, in the canonical form the predictor learns and matches on."""

from __future__ import annotations

import pytest

from harness.calls.action import GIT, SCRIPT, TEST
from harness.calls.canonical import canonical, canonical_bash
from harness.calls.runners import file_target, is_test_file
from harness.speculation.prediction.state import split_test
from tests.test_patterns_dataflow import Script
from tests.test_patterns_rules import keys
from tools.base import Effect

ROOT = "/home/u/proj"

# Commands as agents type them (Claude Code, Codex CLI, OpenHands sessions of JS/TS, Go, Rust, Elixir, Java,
# Ruby and C# projects).
TEST_RUNS = [
    "npm test", "npm t", "npm run test", "npm run test -- --watch=false", "npm test -- src/a.test.ts",
    "npm run test:unit", "npm run build", "npm --prefix web test", "npm -w packages/core run test",
    "pnpm test", "pnpm run build", "pnpm build", "pnpm --filter web test", "pnpm -r test",
    "yarn test", "yarn run test", "yarn build", "yarn jest src/a.test.ts",
    "npx jest", "npx jest src/a.test.ts -t 'adds'", "npx vitest run", "npx vitest run src/a.test.ts",
    "npx tsc --noEmit", "npx --yes jest", "pnpm exec vitest", "./node_modules/.bin/jest", "bun test",
    "bun run test", "deno test",
    "go test ./...", "go test -run TestParse ./internal/parse", "go test -v -count=1 ./...", "go build ./...",
    "go vet ./...", "go build -o bin/app ./cmd/app",
    "cargo test", "cargo test parse_args -- --nocapture", "cargo build --release", "cargo check",
    "cargo +nightly test", "cargo nextest run",
    "mix test", "mix test test/app_test.exs:12", "mix compile",
    "mvn test", "mvn -q test -Dtest=AppTest", "mvn clean verify", "./mvnw test", "gradle test",
    "./gradlew test", "./gradlew :app:test --tests 'com.x.AppTest'", "./gradlew build",
    "make test", "make check", "make -C sub test", "make -j4 check", "make test-unit",
    "bundle exec rspec", "bundle exec rspec spec/models/user_spec.rb:10", "rspec", "bin/rspec spec/a_spec.rb",
    "bundle exec rake test", "bin/rails test",
    "dotnet test", "dotnet test --filter Name~Parse", "dotnet build",
    "pytest tests/test_x.py", "python -m pytest -q", "tox -e py311",
]

NOT_TEST_RUNS = [
    "npm install", "npm i lodash", "npm run lint", "npm build", "yarn", "yarn add react", "pnpm install",
    "bun run dev", "go mod tidy", "go run ./cmd/app", "cargo run -- --help", "cargo fmt", "make", "make install",
    "mvn dependency:tree", "gradle dependencies", "dotnet restore", "bundle install", "mix deps.get", "npx prettier .",
]


@pytest.mark.parametrize("command", TEST_RUNS)
def test_every_ecosystems_test_and_build_runs_are_test_runs(command: str) -> None:
    """Slow, re-run after an edit, speculated in an overlay: a test run as pytest's are."""
    action = canonical_bash(command, ROOT)
    assert (action.kind, action.tool, action.effect) == (TEST, "run_tests", Effect.SANDBOXED), command
    compound = canonical_bash(f"cd web && {command}", ROOT)
    assert (compound.kind, compound.effect) == (TEST, Effect.SANDBOXED), command


@pytest.mark.parametrize("command", NOT_TEST_RUNS)
def test_installs_scripts_and_housekeeping_are_not_test_runs(command: str) -> None:
    assert canonical_bash(command, ROOT).kind != TEST


def test_a_program_run_from_its_source_is_a_script_run() -> None:
    assert canonical_bash("go run ./cmd/app", ROOT).kind == canonical_bash("cargo run", ROOT).kind == SCRIPT


def test_a_test_run_with_variables_set_is_a_test_run_in_bash() -> None:
    action = canonical_bash("CGO_ENABLED=0 go test ./...", ROOT)
    assert (action.tool, action.kind, action.effect) == ("bash", TEST, Effect.SANDBOXED)


@pytest.mark.parametrize("same", [
    ("npm test", "npm run test", "npm t", "npm run-script test", "npm  run  'test'"),
    ("npm test -- --coverage", "npm run test -- --coverage"),
    ("yarn test", "yarn run test"),
    ("pnpm test", "pnpm run test"),
])
def test_spellings_of_one_test_script_are_one_call(same: tuple[str, ...]) -> None:
    assert len({canonical_bash(command, ROOT).key for command in same}) == 1
    assert canonical("run_tests", {"command": same[-1]}, ROOT) == canonical_bash(same[0], ROOT)


@pytest.mark.parametrize("different", [
    ("npm run build", "npm build"),  # npm's own `build` is not the script
    ("bun test", "bun run test"),  # bun's own runner, and the package's script
    ("gradle test", "./gradlew test"),  # the wrapper pins another Gradle
    ("npx jest", "jest"),
    ("npm test", "npm run test:unit"),
    ("make test", "make check"),
    ("go test ./...", "go test ./pkg/..."),
    ("cargo test", "cargo test --release"),
    ("pnpm build", "npm run build"),
])
def test_different_runs_stay_apart(different: tuple[str, str]) -> None:
    assert canonical_bash(different[0], ROOT).key != canonical_bash(different[1], ROOT).key


# Paths under the session's working directory.

@pytest.mark.parametrize("absolute,relative", [
    ("cat /home/u/proj/src/a.ts", "cat src/a.ts"),
    ("npx jest /home/u/proj/src/a.test.ts", "npx jest src/a.test.ts"),
    ("go test /home/u/proj/internal/...", "go test internal/..."),
    ("git diff /home/u/proj/src/a.ts", "git diff src/a.ts"),
    ("node /home/u/proj/scripts/gen.js --out=/home/u/proj/gen", "node scripts/gen.js --out=gen"),
    ("cd /home/u/proj/web && npm test", "cd web && npm test"),
    ("cd /home/u/proj && npm test", "npm test"),
    ("ls /home/u/proj", "ls"),
    ("echo hi > /home/u/proj/out.txt", "echo hi > out.txt"),
    ("wc -l /home/u/proj/src/a.ts /home/u/proj/src/b.ts", "wc -l src/a.ts src/b.ts"),
    ("/home/u/proj/node_modules/.bin/jest src/a.test.ts", "./node_modules/.bin/jest src/a.test.ts"),
    ("/home/u/proj/tests/runtests.py queries", "./tests/runtests.py queries"),
])
def test_absolute_paths_under_the_working_directory_become_relative(absolute: str, relative: str) -> None:
    assert canonical_bash(absolute, ROOT) == canonical_bash(relative, ROOT)
    assert ROOT not in canonical_bash(absolute, ROOT).key


@pytest.mark.parametrize("command", [
    "cat /etc/hosts", "ls /home/u/proj2/src", "ls /home/u/projects", "node /tmp/x.js", 'cat "$HOME/proj/a.ts"',
    "cat /home/u/proj/../other/a.ts",
])
def test_paths_outside_the_working_directory_stay_as_they_are(command: str) -> None:
    assert canonical_bash(command, ROOT) == canonical_bash(command, "/srv/other")


def test_a_command_the_reader_cannot_follow_has_its_paths_made_relative_as_text() -> None:
    command = "cd {0}; for f in $(ls {0}/src); do wc -l {0}/src/$f; done; ls {0}/ {0}2/x"
    assert canonical_bash(command.format(ROOT), ROOT).args["command"] == (
        "cd .; for f in $(ls src); do wc -l src/$f; done; ls . /home/u/proj2/x")


def test_a_call_learned_on_one_machine_is_the_same_call_on_another() -> None:
    pairs = [("bash", {"command": "{}/node_modules/.bin/jest {}/src/a.test.ts"}),
             ("read_file", {"path": "{}/src/a.ts"}), ("grep", {"pattern": "foo", "path": "{}/src"}),
             ("glob", {"pattern": "**/*.ts", "path": "{}/src"}), ("bash", {"command": "git -C {} diff"}),
             ("run_tests", {"command": "cd {} && npm run test"})]
    for name, arguments in pairs:
        here = {k: v.replace("{}", ROOT) for k, v in arguments.items()}
        there = {k: v.replace("{}", "/Users/someone/work/proj") for k, v in arguments.items()}
        assert canonical(name, here, ROOT) == canonical(name, there, "/Users/someone/work/proj"), name


def test_another_agents_tool_keeps_paths_outside_the_working_directory() -> None:
    assert canonical("glob", {"pattern": "*.ts", "path": "/opt/lib"}, ROOT).args["path"] == "/opt/lib"
    assert "path" not in canonical("glob", {"pattern": "*.ts", "path": ROOT}, ROOT).args


# Git.

@pytest.mark.parametrize("command", [
    "git status", "git status --short", "git diff", "git diff src/a.ts", "git diff --stat HEAD~1",
    "git log -n 5", "git log --oneline -10", "git show", "git show HEAD~1 --stat", "git --no-pager diff",
    "git -C /home/u/proj status", "git log --oneline | head -20", "git diff | cat", "git blame -L 10,20 src/a.ts",
    "git branch", "git branch -a", "git stash list", "git tag", "git rev-parse HEAD", "cd /home/u/proj && git status",
])
def test_git_reads_are_pure(command: str) -> None:
    action = canonical_bash(command, ROOT)
    assert (action.kind, action.effect) == (GIT, Effect.PURE), command


@pytest.mark.parametrize("command", [
    "git add -A", "git commit -m x", "git checkout src/a.ts", "git stash", "git stash pop", "git branch fix",
    "git branch -D old", "git tag v1", "git diff --output=p.diff", "git diff > p.diff", "git reset --hard",
    "git status && git add .", "git pull",
])
def test_git_writes_are_not(command: str) -> None:
    assert canonical_bash(command, ROOT).effect == Effect.MUTATING, command


def test_git_reads_are_proposed_again_after_an_edit() -> None:
    script = Script(repo=ROOT)
    script.bash("git status", "On branch main\nnothing to commit, working tree clean\n")
    script.bash("git diff", "")
    script.step("edit_file", {"path": f"{ROOT}/src/a.ts", "old": "a", "new": "b"}, "edited src/a.ts")
    found = keys(script)
    assert "repeat" in found[canonical_bash("git diff", ROOT).key]
    assert "repeat" in found[canonical_bash("git status", ROOT).key]


# Test files and targets of other runners.

@pytest.mark.parametrize("path,yes", [
    ("pkg/parse/parse_test.go", True), ("src/a.test.ts", True), ("src/a.spec.js", True), ("web/App.test.tsx", True),
    ("spec/models/user_spec.rb", True), ("test/app_test.exs", True), ("tests/test_x.py", True),
    ("src/a.ts", False), ("pkg/parse/parse.go", False), ("src/latest.rb", False), ("testdata/x.json", False),
])
def test_test_files_of_every_ecosystem_are_known(path: str, yes: bool) -> None:
    assert is_test_file(path) is yes


@pytest.mark.parametrize("runner,path,target", [
    ("go test", "pkg/parse/parse_test.go", "./pkg/parse"), ("go test", "main_test.go", "."),
    ("go test -v", "pkg/parse", "./pkg/parse"), ("npx jest", "src/a.test.ts", "src/a.test.ts"),
    ("npm test --", "src/a.test.ts", "src/a.test.ts"), ("bundle exec rspec", "spec/a_spec.rb", "spec/a_spec.rb"),
    ("mix test", "test/app_test.exs", "test/app_test.exs"), ("pytest", "tests/test_x.py", "tests/test_x.py"),
    ("pytest", "src/a.test.ts", None), ("go test", "src/a.test.ts", None), ("cargo test", "tests/cli.rs", None),
    ("npx jest", "pkg/parse_test.go", None),
])
def test_a_runner_names_a_test_file_its_own_way(runner: str, path: str, target: str | None) -> None:
    assert file_target(runner, path) == target


@pytest.mark.parametrize("command,runner,target", [
    ("go test -run TestParse ./internal/parse", "go test -run TestParse", "./internal/parse"),
    ("npx jest src/a.test.ts", "npx jest", "src/a.test.ts"),
    ("npm test -- src/a.test.ts", "npm test --", "src/a.test.ts"),
    ("bundle exec rspec spec/a_spec.rb", "bundle exec rspec", "spec/a_spec.rb"),
    ("pytest -q tests/test_x.py", "pytest -q", "tests/test_x.py"),
    ("cargo test parse_args", "cargo test parse_args", None),
    ("make test", "make test", None),
    ("go build ./cmd/app", "go build ./cmd/app", None),
    ("npm run build -- --watch", "npm run build -- --watch", None),
])
def test_a_test_command_splits_into_runner_and_target(command: str, runner: str, target: str | None) -> None:
    assert split_test(command) == (runner, target)


def test_a_go_test_file_in_sight_is_run_as_its_package_with_the_sessions_runner() -> None:
    script = Script(repo=ROOT)
    script.bash("go test ./internal/parse", "ok  \texample.com/app/internal/parse\t0.012s\n")
    script.step("read_file", {"path": f"{ROOT}/internal/lex/lex_test.go"}, "package lex\n")
    found = keys(script)
    assert "test_in_sight" in found[canonical_bash("go test ./internal/lex", ROOT).key]
    assert canonical_bash("go test internal/lex/lex_test.go", ROOT).key not in found


def test_git_status_is_proposed_at_the_start_and_git_diff_after_an_unseen_edit() -> None:
    script = Script(repo=ROOT)
    assert "git_start" in keys(script)[canonical_bash("git status", ROOT).key]
    script.step("read_file", {"path": f"{ROOT}/src/a.ts"}, "export const a = 1;\n")
    script.step("edit_file", {"path": f"{ROOT}/src/a.ts", "old": "1", "new": "2"}, "edited src/a.ts")
    found = keys(script)
    assert "git_diff_edit" in found[canonical_bash("git diff", ROOT).key]
    assert "git_diff_file" in found[canonical_bash("git diff src/a.ts", ROOT).key]
    assert "git_status_edit" in found[canonical_bash("git status", ROOT).key]
    script.bash("git diff", "diff --git a/src/a.ts b/src/a.ts\n")
    found = keys(script)
    assert "git_diff_edit" not in found.get(canonical_bash("git diff", ROOT).key, "")
