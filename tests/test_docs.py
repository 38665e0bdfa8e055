"""Every code block a user can run in README.md and docs/**/*.md is run here, so a doc command cannot rot.

What runs (one test per block, named FILE:LINE of its opening fence, e.g. `README.md:58`):

- ```bash / ```sh / ```shell: the whole block, with bash (`set -eo pipefail`: the first failing command
  fails the test). ```console: only the lines after a `$ ` prompt (and their `\\` continuations); the
  other lines are output.
- ```python / ```py: the block, with the python of the virtual environment that runs the tests.
- ```yaml / ```yml holding a whole scenario (a mapping with `name` and `rounds`): `emulator validate`.
  Other YAML blocks are fragments and are not run.
- Untagged (and ```text) blocks are diagrams, layouts and printed output: never run. A check below fails
  when an untagged block looks like nothing but commands, so a command cannot hide from the tests there.

Where: the blocks of one file run in order in one working directory, a temporary copy of the repository
(every top-level entry but .git, .venv, runs/ and caches; `.venv` is a link to the environment under test),
so files carry over from block to block (a Python block reads the `runs/skewed` a shell block made) and
nothing a doc writes (runs/, report/, ...) lands in the repository. Each block is its own process: shell
variables, `cd` and `source .venv/bin/activate` do not carry over, files do. Each `emulator` command and
Python block runs in a child forked from one process per worker that imported torch, Ray and the emulator
once (doc_launcher.py, conftest.launcher: about 4 s of CPU saved a command), and so do the worker processes of
a sweep they start; EMULATOR_DOC_LAUNCHER=0 starts each afresh. Ray: every block of a test
worker uses one warm instance (`emulator up`, started once in a directory of its own, with a state file of
its own: EMULATOR_WARM_STATE), instead of each `emulator run` starting and stopping its own Ray and actor
processes (several seconds each on 2 cores; a run resolves its paths in its own working directory, so one
instance serves every file's); warm runs give the metrics of cold ones (test_warm.py), that a
plain `emulator run` starts its own Ray is tested in test_token_auth.py, the real entry point's exit codes in
test_reliability.py and test_faults.py. PATH starts
with that environment's bin/. Running one block alone (`-k 'README.md:58'`) first runs the blocks above it in its file,
except `slow` ones that are not selected: a block must not need a `slow` block above it.
`make` runs as `make -o .venv/.installed`: the environment under test is never reinstalled (a pip install
from the temporary copy would point the editable install at it).

Markers: HTML comments on the lines just above the opening fence (invisible on GitHub), one per line:

    <!-- doc-test: --set rounds=2 -->       options added at the end of every `emulator run` and
                                            `emulator sweep` the block calls (also through a variable such
                                            as `$S`, and `make demo` through DEMO_ARGS); later `--set` win,
                                            so this shortens a run. `--seeds N` and `--parallel N` go to
                                            sweeps only.
    <!-- doc-test: skip: REASON -->         not run; the reason shows in pytest's summary. Only for what
                                            cannot run here (`make test` would run the suite recursively,
                                            a multi-machine Ray cluster, a web server, installs).
    <!-- doc-test: setup: COMMANDS -->      bash run first, in the same directory, for what the text
                                            leaves implicit (e.g. the runs `emulator report runs/a runs/b`
                                            compares).
    <!-- doc-test: slow -->                 marks the test `slow` (`-m "not slow"` leaves it out); `slow`
                                            may also begin another marker: `<!-- doc-test: slow --set ... -->`.

An unknown directive, a skip without a reason, or a marker with no block under it fails the check
`test_doc_markers_are_well_formed`. Blocks that mention Fashion-MNIST are skipped when the dataset is not
installed (like the other tests), and so is a later block of the same file that fails after one of those.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from conftest import launcher
from emulator.data.vision import DEBIAN_FASHION_MNIST as FMNIST_DIR

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "analysis" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent            # the virtual environment that runs the tests
VENV = BIN.parent
TIMEOUT_S = 900                               # one block, including its setup
# `emulator` commands and Python blocks through one pre-imported process per worker (doc_launcher.py);
# EMULATOR_DOC_LAUNCHER=0 runs each as a process of its own, as a user's shell would
USE_LAUNCHER = os.environ.get("EMULATOR_DOC_LAUNCHER", "1") != "0"

SHELL = {"bash", "sh", "shell", "zsh"}
CONSOLE = {"console", "shell-session"}
PYTHON = {"python", "py", "python3"}
YAML = {"yaml", "yml"}
TEXT = {"", "text", "txt", "plain"}
# First words that make an untagged block look like commands (see test_untagged_blocks_hold_no_commands).
COMMAND_WORDS = ("emulator ", "make ", "python ", "python3 ", "pip ", "ray ", "tensorboard ", "source ",
                 ".venv/", "$ ", "cd ", "export ", "pytest")
# Top-level entries of the repository that are not copied into the working directory.
# what a fresh clone lacks too: the environment, outputs, tools' caches, locally built wheels (benchmarks/gpu_wheels.sh)
NOT_COPIED = {".git", ".venv", "runs", "report", ".pytest_cache", "build", "dist", "__pycache__", ".whl", ".hypothesis",
              ".import_linter_cache", ".mypy_cache", ".ruff_cache"}

MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
FMNIST = re.compile(r"fmnist|fashion[-_ ]?mnist", re.IGNORECASE)


@dataclass
class Block:
    doc: Path
    line: int                       # 1-based line of the opening fence
    lang: str
    text: str
    args: list[str] = field(default_factory=list)
    skip: str | None = None
    setup: list[str] = field(default_factory=list)
    slow: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def kind(self) -> str | None:
        """shell, python or scenario when the block is run; None when it is not."""
        if self.lang in SHELL or self.lang in CONSOLE:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        if self.lang in YAML and _is_scenario(self.text):
            return "scenario"
        return None


def _is_scenario(text: str) -> bool:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:     # broken YAML that is meant as a scenario is rot too: validate reports it
        return all(re.search(rf"^{key}:", text, re.MULTILINE) for key in ("name", "rounds"))
    return isinstance(data, dict) and "name" in data and "rounds" in data


def parse_doc(doc: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a Markdown file with their markers, and the problems with markers (stray ones)."""
    lines = doc.read_text().splitlines()
    blocks: list[Block] = []
    used: set[int] = set()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = len(match["indent"]), match["fence"], match["info"].lower()
        body, j = [], i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and stripped.strip(fence[0]) == "":
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
            j += 1
        block = Block(doc, i + 1, info, "\n".join(body) + "\n")
        k = i - 1                                   # markers: the marker lines (and blank lines) just above
        while k >= 0 and (lines[k].strip() == "" or MARKER.match(lines[k])):
            if MARKER.match(lines[k]):
                used.add(k)
                _apply_marker(block, MARKER.match(lines[k])["body"], k + 1)
            k -= 1
        blocks.append(block)
        i = j + 1
    stray = [f"{doc.relative_to(ROOT)}:{n + 1}: a doc-test marker with no code block under it"
             for n, line in enumerate(lines) if MARKER.match(line) and n not in used]
    return blocks, stray


def _apply_marker(block: Block, body: str, line: int) -> None:
    where = f"{block.doc.relative_to(ROOT)}:{line}"
    if body == "slow" or body.startswith("slow "):                # `slow` may begin any marker
        block.slow, body = True, body[4:].strip()
        if not body:
            return
    if body.startswith("--"):
        block.args[:0] = shlex.split(body)          # markers are read bottom-up; keep their order
    elif body.startswith("skip"):
        reason = body.partition(":")[2].strip()
        if not reason:
            block.errors.append(f"{where}: `skip` needs a reason: <!-- doc-test: skip: WHY IT CANNOT RUN -->")
        block.skip = reason or "no reason given"
    elif body.startswith("setup:"):
        block.setup.insert(0, body.partition(":")[2].strip())
    else:
        block.errors.append(f"{where}: unknown doc-test marker {body!r}; use `--OPTION ...`, `skip: REASON`, "
                            "`setup: COMMANDS` or `slow`")
    if block.kind is None and not body.startswith("skip"):
        block.errors.append(f"{where}: a marker on a block that is not run (```{block.lang or ''})")


PARSED = {doc: parse_doc(doc) for doc in DOCS}
BLOCKS = [block for blocks, _ in PARSED.values() for block in blocks]
RUNNABLE = [block for block in BLOCKS if block.kind is not None]


# ---------------------------------------------------------------------------------------------- running

@dataclass
class Outcome:
    ran: bool
    ok: bool
    skipped_for_data: bool = False
    message: str = ""
    seconds: float = 0.0


def _console_commands(text: str) -> str:
    """The commands of a ```console block: lines after a `$ ` prompt and their `\\` continuations."""
    out, continuing = [], False
    for line in text.splitlines():
        if continuing or line.startswith("$ "):
            command = line if continuing else line[2:]
            out.append(command)
            continuing = command.rstrip().endswith("\\")
    return "\n".join(out) + "\n"


def _sweep_only(args: list[str]) -> tuple[list[str], list[str]]:
    """Marker options for `emulator run` and for `emulator sweep` (--seeds and --parallel: sweeps only)."""
    run, i = [], 0
    while i < len(args):
        if args[i] in ("--seeds", "--parallel"):
            i += 2
            continue
        if args[i].startswith(("--seeds=", "--parallel=")):
            i += 1
            continue
        run.append(args[i])
        i += 1
    return run, list(args)


def shell_script(block: Block, emulator: list[str] | None = None, python: list[str] | None = None) -> str:
    """The block as a bash script; `emulator`: the argv that runs the `emulator` command (the launcher's
    client, doc_launcher.py), else the console script on PATH; `python`: the argv that runs `python FILE.py`
    (the launcher's), else the python on PATH."""
    run_args, sweep_args = _sweep_only(block.args)
    body = _console_commands(block.text) if block.lang in CONSOLE else block.text
    quoted = lambda args: " ".join(shlex.quote(a) for a in args)  # noqa: E731
    return "\n".join([
        "set -eo pipefail",
        "trap 's=$?; [[ $BASH_COMMAND == return* ]] || echo \"doc-test: exit status $s from: $BASH_COMMAND\" >&2' ERR",
        f"_doc_run_args=({quoted(run_args)})",
        f"_doc_sweep_args=({quoted(sweep_args)})",
        f"_doc_emulator=({quoted(emulator or ['command', 'emulator'])})",
        "emulator() {  # the doc's own command, with the marker's options at the end of run and sweep",
        '  local extra=()',
        '  case "${1-}" in run) extra=("${_doc_run_args[@]}");; sweep) extra=("${_doc_sweep_args[@]}");; esac',
        '  printf "+ emulator %s\\n" "$*${extra[*]:+ ${extra[*]}}" >&2',
        '  "${_doc_emulator[@]}" "$@" "${extra[@]}" && return',
        '  local status=$?; printf "doc-test: exit status %s from: emulator %s\\n" $status "$*" >&2; return $status',
        "}",
        # never reinstall the environment under test; `make demo` takes the marker's options too (DEMO_ARGS)
        'make() { command make -o .venv/.installed DEMO_ARGS="${_doc_run_args[*]}" "$@"; }',
        f"_doc_python=({quoted(python or [])})",
        "python() {  # `python FILE.py ...` as the launcher runs it, when there is one; anything else as written",
        '  if [[ ${#_doc_python[@]} -gt 0 && "${1-}" == *.py ]]; then "${_doc_python[@]}" "$@";',
        '  else command python "$@"; fi',
        "}",
        *(f"{command}  # setup" for command in block.setup),
        f"# {block.id}",
        body,
    ])


def _tail(text: str, limit: int = 4000) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


class WarmRay:
    """The test worker's warm instance (`emulator up`), shared by the blocks of every file: started in a
    directory of its own before the first block that may run something, and again if a block stopped it
    (docs/running.md shows `emulator down`); every `emulator run`, sweep and `emulator.run(...)` attaches to it."""

    def __init__(self, home: Path):
        self.home = home
        self.state = home / "warm.json"
        self.up = False
        self.starting: subprocess.Popen | None = None

    def join(self, env: dict) -> None:
        """Make sure it runs. A restart under way (see `restart`) is not waited for: the block runs
        meanwhile (its runs start their own Ray, or need none) and a later block finds it up."""
        if self.starting is not None:
            if self.starting.poll() is None:
                return
            self._started()
        if self.state.is_file():
            return
        self.restart(env)
        self.starting.wait(timeout=300)
        self._started()

    def restart(self, env: dict) -> None:
        """Start it in the background if it is not running (docs/running.md's `emulator down` stops it)."""
        if self.starting is None and not self.state.is_file():
            self.starting = subprocess.Popen([str(BIN / "emulator"), "up"], cwd=self.home, env=env,
                                             stdout=subprocess.DEVNULL, stderr=open(self.home / "up.log", "w"))

    def _started(self) -> None:
        code, self.starting = self.starting.returncode, None
        if code != 0:
            raise RuntimeError("the warm instance for the doc tests did not start:\n"
                               f"{(self.home / 'up.log').read_text()}")
        self.up = True

    def close(self, env: dict) -> None:
        if self.starting is not None:
            self.starting.wait(timeout=300)
            self._started()
        if self.up:
            self.up = False
            subprocess.run([str(BIN / "emulator"), "down"], cwd=self.home, env=env, capture_output=True, timeout=120)


class DocRunner:
    """Runs the blocks of one Markdown file, in order, in one working directory; remembers each outcome."""

    def __init__(self, doc: Path, workdir: Path, warm: WarmRay, launcher=None):
        self.doc, self.workdir, self.warm, self.launcher = doc, workdir, warm, launcher
        self.scratch = workdir / ".doc-test"          # the block files themselves
        self.outcomes: dict[int, Outcome] = {}
        for entry in ROOT.iterdir():
            if entry.name in NOT_COPIED or entry.name.endswith(".egg-info"):
                continue
            target = workdir / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(entry, target)
        (workdir / ".venv").symlink_to(VENV, target_is_directory=True)
        self.scratch.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
        self.env.update(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(VENV),
                        MPLBACKEND="Agg", PYTHONUNBUFFERED="1", COLUMNS="120",
                        EMULATOR_WARM_STATE=str(warm.state))

    def _join_ray(self) -> None:
        self.warm.join(self.env)

    def outcome(self, block: Block, selected: set[str]) -> Outcome:
        """Runs the blocks above `block` that have not run yet (a `slow` one only when it is selected: no
        block may need a slow one), then `block`."""
        for earlier in PARSED[self.doc][0]:
            if earlier.line > block.line:
                break
            if earlier.kind is None or earlier.line in self.outcomes:
                continue
            if earlier is not block and earlier.slow and earlier.id not in selected:
                continue
            self.outcomes[earlier.line] = self._run(earlier)
        return self.outcomes[block.line]

    def earlier(self, block: Block) -> list[tuple[Block, Outcome]]:
        return [(b, self.outcomes[b.line]) for b in PARSED[self.doc][0]
                if b.line < block.line and b.line in self.outcomes]

    def _run(self, block: Block) -> Outcome:
        if block.errors or block.skip:
            return Outcome(ran=False, ok=False)
        if not FMNIST_DIR.is_dir() and FMNIST.search(block.text + " ".join(block.setup)):
            return Outcome(ran=False, ok=False, skipped_for_data=True)
        stem = block.id.replace("/", "_").replace(":", "-line")          # docs_scenarios.md-line9
        if block.kind != "scenario":                      # `emulator validate` starts no Ray
            self._join_ray()
        launcher = self.launcher() if self.launcher else None
        commands = (launcher.prefix("cli"), launcher.prefix("script")) if launcher else ()  # `emulator`, `python`
        if block.kind == "shell":
            script = self.scratch / f"{stem}.sh"
            script.write_text(shell_script(block, *commands))
            command = ["bash", str(script)]
        elif block.kind == "python":
            script = self.scratch / f"{stem}.py"
            script.write_text(block.text)
            command = [*(launcher.prefix("script") if launcher else [sys.executable]), str(script)]
            if block.setup:  # the setup as a shell block's (its `emulator` through the launcher), then the block
                setup = Block(block.doc, block.line, "bash", "", setup=block.setup)
                command = ["bash", "-c", shell_script(setup, *commands) + '\nexec "$@"', "setup", *command]
        else:                                             # a scenario: validate it
            script = self.scratch / f"{stem}.yaml"
            script.write_text(block.text)
            emulator = launcher.prefix("cli") if launcher else [str(BIN / "emulator")]
            command = [*emulator, "validate", "--quiet", str(script.relative_to(self.workdir))]
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=self.workdir, env=self.env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, start_new_session=True)
            returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            returncode = f"timeout after {TIMEOUT_S} s"
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        seconds = time.monotonic() - start
        if block.kind != "scenario" and self.warm.up:
            self.warm.restart(self.env)  # a block stopped it (`emulator down`): back up while the next ones run
        if returncode == 0:
            return Outcome(ran=True, ok=True, seconds=seconds)
        text = script.read_text() if block.kind == "shell" else block.text
        message = "\n".join([
            f"{block.id}: the ```{block.lang} block failed (exit {returncode}, {seconds:.0f} s)",
            f"working directory: {self.workdir}",
            f"command: {shlex.join(command)}",
            f"--- what ran ({script.name}) ---", text.rstrip(),
            "--- stdout (tail) ---", _tail(stdout),
            "--- stderr (tail) ---", _tail(stderr),
        ])
        return Outcome(ran=True, ok=False, message=message, seconds=seconds)


@pytest.fixture(scope="session")
def doc_runner(tmp_path_factory):
    runners: dict[Path, DocRunner] = {}
    warm = WarmRay(tmp_path_factory.mktemp("doc-ray"))

    def get(doc: Path) -> DocRunner:
        """The runner of one Markdown file, made (with its working directory) on first use."""
        if doc not in runners:
            name = doc.relative_to(ROOT).as_posix().replace("/", "_")
            runners[doc] = DocRunner(doc, tmp_path_factory.mktemp(f"doc-{name}"), warm,
                                     launcher if USE_LAUNCHER else None)
        return runners[doc]

    yield get
    if runners:
        warm.close(next(iter(runners.values())).env)


def _param(block: Block):
    return pytest.param(block, id=block.id, marks=[pytest.mark.slow] if block.slow else [])


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_doc_block_runs(block: Block, doc_runner, request):
    if block.errors:
        pytest.fail("\n".join(block.errors), pytrace=False)
    if block.skip:
        pytest.skip(f"{block.id}: {block.skip}")
    runner = doc_runner(block.doc)
    selected = {item.callspec.id for item in request.session.items if hasattr(item, "callspec")}
    outcome = runner.outcome(block, selected)
    if outcome.skipped_for_data:
        pytest.skip(f"{block.id}: needs Fashion-MNIST in {FMNIST_DIR} (apt-get install dataset-fashion-mnist)")
    if outcome.ok:
        return
    earlier = runner.earlier(block)
    if any(o.skipped_for_data for _, o in earlier):
        pytest.skip(f"{block.id}: failed after a block above it was skipped for want of Fashion-MNIST")
    failed_before = [b.id for b, o in earlier if o.ran and not o.ok]
    note = f"\n(blocks above it failed too, it may depend on them: {', '.join(failed_before)})" if failed_before else ""
    pytest.fail(outcome.message + note, pytrace=False)


def test_doc_markers_are_well_formed():
    problems = [e for blocks, stray in PARSED.values() for e in stray + [x for b in blocks for x in b.errors]]
    assert not problems, "\n".join(problems)


def test_untagged_blocks_hold_no_commands():
    """An untagged block is never run, so one made only of commands would escape the tests: tag it."""
    suspects = []
    for block in BLOCKS:
        if block.lang not in TEXT:
            continue
        lines = [line.strip() for line in block.text.splitlines() if line.strip() and not line.startswith("#")]
        if lines and all(line.startswith(COMMAND_WORDS) or line.endswith("\\") for line in lines):
            suspects.append(f"{block.id}: looks like commands; tag it ```bash (it is then run) or ```text")
    assert not suspects, "\n".join(suspects)


def test_every_doc_is_found():
    """The glob covers README.md and the docs (a renamed folder would otherwise silently test nothing)."""
    names = {doc.relative_to(ROOT).as_posix() for doc in DOCS}
    assert {"README.md", "docs/scenarios.md", "docs/architecture.md"} <= names
    assert len(RUNNABLE) > 5
