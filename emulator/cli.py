"""`emulator run | validate | report | sweep | up | down | parts`: the command line.

Bad input exits with code 2 and a message, never a traceback."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from emulator.errors import ScenarioError

# Everything else is imported inside the command that needs it, for start-up speed: `emulator --help` and a
# refused scenario answer before torch and Ray are imported.

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
# A run that ran to its end but went wrong (emulator/recording/health.py): its own code, as its own status.
EXIT_DIVERGED, EXIT_NO_PROGRESS = 3, 4
RUN_STATUS_EXIT = {"completed": EXIT_OK, "diverged": EXIT_DIVERGED, "no_progress": EXIT_NO_PROGRESS}


def _accuracy(text: str) -> float:
    """--target: a test accuracy, in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a test accuracy such as 0.8") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a test accuracy: give a fraction in (0, 1], such as 0.8")
    return value


def _at_least(low, number=int):
    """A number option of at least `low` (argparse type): a whole number, or with number=float any."""
    def parse(text: str):
        try:
            value = number(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if number is int else ''}number") from None
        if not value >= low:  # NaN too
            raise argparse.ArgumentTypeError(f"{text} is too small: at least {low}")
        return value
    return parse


# What each --help ends with: command lines to copy (shipped scenarios; tests/test_cli.py parses every one) and
# where the documentation is.
EXAMPLES = {
    "": """\
examples:
  emulator run scenarios/quickstart.yaml                  # 1000 phones, FedAvg: under a minute on a laptop
  emulator run scenarios/quickstart.yaml --set rounds=10  # any field of the file, from the command line
  emulator validate scenarios/quickstart.yaml             # the file resolved, every default filled in
  emulator run --resume RUN_DIR                           # continue an interrupted run
  emulator report runs/* --out report                     # plots and a comparison table of runs
  emulator parts                                          # the algorithms, models, datasets... registered
  emulator cache                                          # the data cache: what it holds, pruning it

exit codes: 0 done, 1 failed (the machine), 2 bad input, 3 diverged, 4 no progress, 130 interrupted
docs: README.md (a first run), docs/scenarios.md (every scenario key), docs/running.md (watching, resuming,
comparing, failures), docs/extending.md (your own parts), docs/api.md (the same from Python)""",
    "run": """\
examples:
  emulator run scenarios/quickstart.yaml
  emulator run scenarios/quickstart.yaml --set rounds=10 --set algorithm.client_lr=0.1 --out runs/short
  emulator run scenarios/system/diurnal_dropout.yaml --quiet
  emulator run --resume RUN_DIR                           # on from its last checkpoint
  emulator run --resume RUN_DIR --set rounds=100          # ... and further than first planned
  emulator run examples/fedlab/feddyn.yaml                # a plugin's algorithm, model and data

docs: docs/scenarios.md (the keys --set reaches), docs/running.md (the run directory, interrupting and
resuming, exit codes), docs/extending.md (plugins)""",
    "validate": """\
examples:
  emulator validate scenarios/quickstart.yaml             # stdout: the resolved file; stderr: memory, disk
  emulator validate scenarios/quickstart.yaml --set 'population.availability[0].mean_on_s=7200'
  emulator validate scenarios/quickstart.yaml --quiet     # only the exit code (2: every problem listed)

docs: docs/scenarios.md (every key, its default and range)""",
    "report": """\
examples:
  emulator report runs/* --out report                     # every run under runs/
  emulator report runs/a runs/b --out report --target 0.75 --formats png

docs: docs/running.md (comparing runs: what the report holds, its figures)""",
    "sweep": """\
examples:
  emulator sweep scenarios/quickstart.yaml --grid algorithm.client_lr=0.01,0.1 --seeds 3
  emulator sweep scenarios/quickstart.yaml --grid system.over_selection=1.0,1.3 --set rounds=30 --parallel 2

docs: docs/running.md (sweeps and their report), docs/cluster.md (--address)""",
    "up": """\
examples:
  emulator up                                             # then each emulator run starts in a second
  emulator up --num-cpus 4 --runners 4

docs: docs/running.md (short runs: a warm instance)""",
    "down": """\
examples:
  emulator down

docs: docs/running.md (short runs: a warm instance)""",
    "cache": """\
examples:
  emulator cache                                          # what the data cache holds, least recently used first
  emulator cache --keep-gb 20                             # marks what would go to fit in 20 GB
  emulator cache --keep-gb 20 --prune                     # ... and removes it
  emulator cache --unused-days 30 --prune --dir /data/federations

docs: docs/scenarios.md (data.store: the cache)""",
    "parts": """\
examples:
  emulator parts                                          # ours and installed packages'
  emulator parts --plugin fedlab                          # with a plugin module's parts
  emulator parts examples/fedlab/feddyn.yaml              # with the plugins a scenario names

docs: docs/scenarios.md (where each name goes), docs/extending.md (registering parts of your own)""",
}


def _parser() -> argparse.ArgumentParser:
    # allow_abbrev=False everywhere: argparse would otherwise take --qu for --quiet, and an abbreviation could
    # silently become another option when one is added
    help_format = dict(formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser = argparse.ArgumentParser(prog="emulator", description="Cross-device federated learning emulator.",
                                     epilog=EXAMPLES[""], **help_format)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                                   epilog=EXAMPLES[name], **help_format)

    def plugin_arg(p):
        p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                       help="import a module that registers algorithms, models, datasets... (repeatable; added "
                            "to the scenario's plugins)")

    def scenario_args(p):
        p.add_argument("scenario", help="scenario YAML file")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a field, e.g. --set rounds=50 --set algorithm.client_lr=0.1 (repeatable)")
        plugin_arg(p)

    run = command("run", "run a scenario, or continue an interrupted run with --resume")
    run.add_argument("scenario", nargs="?", help="scenario YAML file")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field, e.g. --set rounds=50 --set algorithm.client_lr=0.1 (repeatable)")
    plugin_arg(run)
    run.add_argument("--resume", metavar="RUN_DIR", help="continue this run from its last checkpoint")
    run.add_argument("--out", help="run directory (default: OUTPUT_DIR/NAME-TIMESTAMP)")
    run.add_argument("--address", help="Ray cluster address (overrides runtime.address)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--profile-startup", action="store_true",
                     help="print where the start-up went: imports, validation, data, Ray, actors, first round")

    validate = command("validate", "check a scenario file and print it resolved")
    scenario_args(validate)
    validate.add_argument("--quiet", action="store_true", help="print nothing when the file is valid")

    report = command("report", "plots and a comparison table of one or many runs")
    report.add_argument("runs", nargs="+", help="run directories, or directories holding runs")
    report.add_argument("--out", required=True, help="where to write report.md and the figures")
    report.add_argument("--target", type=_accuracy, help="test accuracy for time-to-accuracy (e.g. 0.8)")
    report.add_argument("--last", type=_at_least(1), default=5, help="final accuracy = mean of the last N evaluations")
    report.add_argument("--title", default="Run report")
    report.add_argument("--figure-width", choices=["one", "two"], default="two",
                        help="figures for one column (3.3 in) or two columns (7 in, the default) of a paper")
    report.add_argument("--formats", type=_figure_formats, default=None, metavar="png[,pdf,svg]",
                        help="figure files to write (default png,pdf,svg, or EMULATOR_FIGURE_FORMATS); png alone "
                             "takes a third of the time")

    sweep = command("sweep", "run a grid of scenario variants x seeds concurrently, then report")
    scenario_args(sweep)
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                       help="a field and its values, e.g. --grid algorithm.client_lr=0.01,0.1 (repeatable)")
    sweep.add_argument("--seeds", type=_at_least(1), default=1, help="seeds per grid point (seed, seed+1, ...)")
    sweep.add_argument("--out", help="sweep directory (default: OUTPUT_DIR/sweep-NAME-TIMESTAMP)")
    sweep.add_argument("--parallel", type=_at_least(1), default=4, help="runs in flight at once (default 4)")
    sweep.add_argument("--target", type=_accuracy, help="test accuracy for time-to-accuracy in the report")
    sweep.add_argument("--address", help="Ray cluster address (overrides runtime.address)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    up = command("up", "keep a warm local Ray instance and runner pool for the next runs (emulator down stops it)")
    up.add_argument("--num-cpus", type=_at_least(1), help="CPUs the instance offers (default: all of this machine's)")
    up.add_argument("--runners", type=_at_least(1), help="warm runners (default: one per CPU)")
    command("down", "stop the warm instance that emulator up started")
    cache = command("cache", "list the data cache's federations, least recently used first, and prune it")
    cache.add_argument("--dir", help="the cache (default: $EMULATOR_DATA_CACHE, else ~/.cache/emulator/federations)")
    cache.add_argument("--keep-gb", type=_at_least(0, float), metavar="GB",
                       help="pick the least recently used until the rest fit in this many GB")
    cache.add_argument("--unused-days", type=_at_least(0, float), metavar="DAYS",
                       help="pick those no run has opened for this many days")
    cache.add_argument("--prune", action="store_true", help="remove those picked, and writes cut short over a day "
                                                            "ago (without it: only listed)")
    parts = command("parts", "list the registered algorithms, models, datasets... with where each comes from")
    parts.add_argument("scenario", nargs="?", help="also load the plugins this scenario file names")
    plugin_arg(parts)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from emulator.errors import MachineError
    from emulator.runtime.interrupts import RunInterrupted

    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "report":
            return _report(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command in ("up", "down"):
            return _warm(args)
        if args.command == "parts":
            return _parts(args)
        if args.command == "cache":
            return _cache(args)
        return _run(args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MachineError as exc:  # the disk, Ray's start: one line, whatever was written is kept
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except MemoryError:
        print("error: out of memory: this scenario needs more than the machine has; lower population.devices or "
              "the data (data.synthetic.max_samples, data.test_samples), or run on a larger machine "
              "(every finished round is kept in the run directory)", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        signal_name = f" ({exc})" if isinstance(exc, RunInterrupted) else ""
        print(f"\ninterrupted{signal_name}: {_where_the_rounds_are(exc)}", file=sys.stderr)
        return 128 + int(exc.signum) if isinstance(exc, RunInterrupted) else EXIT_INTERRUPTED


def _where_the_rounds_are(exc: KeyboardInterrupt) -> str:
    """What an interruption left, as the driver saw it: no run directory yet, or the one to resume."""
    if not hasattr(exc, "run_dir"):  # a sweep, or a stop outside a run: each run directory says its own state
        return "every finished round is saved in its run directory; continue one with emulator run --resume RUN_DIR"
    if exc.run_dir is None:
        return "stopped before the run started: nothing was written"
    return f"every finished round is saved in {exc.run_dir}; continue it with emulator run --resume {exc.run_dir}"


def _validate(args) -> int:
    from emulator.parts import load_scenario
    from emulator.scenario import dump_scenario

    from emulator.data.store import cache_space
    from emulator.system.checks import machine_memory
    from emulator.system.footprint import estimate

    scenario = load_scenario(args.scenario, args.overrides, args.plugins)
    if not args.quiet:
        print(dump_scenario(scenario), end="")
        print(f"# {args.scenario}: valid", file=sys.stderr)
        footprint, memory = estimate(scenario), machine_memory()
        print(f"# memory: {footprint.describe()}; this machine has {memory / 2 ** 30:,.1f} GiB"
              + (" (not enough: lower population.devices or the data, or use a larger machine)"
                 if footprint.total > memory else ""), file=sys.stderr)
        if footprint.on_disk:
            cache, free = cache_space(scenario.data.store)
            print(f"# disk: the data cache {cache} has {free / 2 ** 30:,.1f} GiB free"
                  + (" (perhaps not enough: point data.store.cache at a larger disk, prune it with emulator cache, or "
                     "lower population.devices)"
                     if footprint.on_disk > free else ""), file=sys.stderr)
    return EXIT_OK


def _cache(args) -> int:
    from emulator.data.cache_upkeep import upkeep
    from emulator.data.store import default_cache

    cache = Path(args.dir).expanduser() if args.dir else default_cache()
    keep = None if args.keep_gb is None else int(args.keep_gb * 1e9)
    print(upkeep(cache, keep, args.unused_days, args.prune))
    return EXIT_OK


def _parts(args) -> int:
    from emulator.parts.listing import listing

    print(listing(args.plugins, args.scenario), end="")
    return EXIT_OK


def _run(args) -> int:
    from emulator.runtime.startup import StartupProfile

    profile = StartupProfile()
    from emulator.driver import AlreadyFinished, resumable_scenario, resume_run, run_scenario
    from emulator.parts import load_scenario
    from emulator.recording.progress import RunProgress, format_duration
    from emulator.runtime.interrupts import stop_on_signals

    profile.span("interpreter, imports", profile.origin)

    if (args.scenario is None) == (args.resume is None):
        raise ScenarioError("emulator run: give a scenario file, or --resume RUN_DIR (not both)")
    overrides = list(args.overrides) + ([f"runtime.address={args.address}"] if args.address else [])
    with stop_on_signals() as stop:
        if args.resume:
            if args.out:
                raise ScenarioError("--out: a resumed run continues in its own directory; drop --out")
            if args.plugins:
                raise ScenarioError("--plugin: a resumed run uses the plugins it started with (its scenario.yaml); "
                                    "drop --plugin")
            with profile.phase("validation"):
                scenario = resumable_scenario(args.resume, overrides)
            try:
                with RunProgress(scenario, enabled=not args.quiet) as progress:
                    result = resume_run(args.resume, on_round=progress.update, overrides=overrides, stop=stop,
                                        profile=profile)
            except AlreadyFinished as done:
                print(done, file=sys.stderr)
                return EXIT_OK
        else:
            with profile.phase("validation"):
                scenario = load_scenario(args.scenario, overrides, args.plugins)
            with RunProgress(scenario, enabled=not args.quiet) as progress:
                result = run_scenario(scenario, args.out, on_round=progress.update, stop=stop, profile=profile)
    profile.span("whole run, to the end of its shutdown", profile.origin)
    summary = result.summary
    parts = [f"{scenario.name}: {summary['rounds_completed']} rounds"]
    if summary.get("final_test_acc") is not None:
        parts.append(f"test accuracy {summary['final_test_acc']:.4f}")
    if summary.get("dp_epsilon") is not None:  # the nominal epsilon, and the bound that needs no sampling
        parts.append(f"epsilon {summary['dp_epsilon']:.2f} nominal ({summary['dp_epsilon_device_max']:.2f} "
                     "for the most-seen device)")
    parts.append(f"simulated {format_duration(summary['sim_time_s'])}")
    parts.append(f"{(summary['bytes_down'] + summary['bytes_up']) / 1e6:.1f} MB")
    parts.append(f"wall {summary['wall_time_s']:.1f} s")
    print(", ".join(parts) + f" -> {Path(result.path)}")
    if args.profile_startup:  # seconds from this process's start (phases may overlap: data loads while Ray starts)
        print(f"start-up profile ({scenario.runtime.backend} backend; seconds from the process's start):\n"
              f"{profile.table()}", file=sys.stderr)
    if summary["status"] != "completed":
        print(f"error: {summary.get('error', summary['status'])}", file=sys.stderr)
    return RUN_STATUS_EXIT.get(summary["status"], EXIT_FAILED)


def _warm(args) -> int:
    from emulator.runtime import warm
    from emulator.server import SERVER_ACTOR

    if args.command == "down":
        stopped = warm.down()
        print("stopped the warm instance" + (f" at {stopped.address}" if stopped else ": none was running"))
        return EXIT_OK
    if args.num_cpus is not None and args.num_cpus < 1 or args.runners is not None and args.runners < 1:
        raise ScenarioError("emulator up: --num-cpus and --runners take a whole number >= 1")
    running = warm.find()
    try:
        instance = running or warm.up(SERVER_ACTOR, args.num_cpus, args.runners)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"warm instance {'already running' if running else 'up'} at {instance.address}: {instance.runners} "
          "runners and an idle server; `emulator run` and emulator.run(...) use it until `emulator down`")
    return EXIT_OK


def _figure_formats(text: str) -> tuple[str, ...]:
    from emulator.analysis.figure_style import parse_formats  # only when given: matplotlib is slow to import

    try:
        return parse_formats(text, "--formats")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _report(args) -> int:
    from emulator.analysis.report import write_report
    from emulator.analysis.runs import NotARunError

    try:
        path = write_report(args.runs, args.out, target=args.target, last=args.last, title=args.title,
                            figure_width=f"{args.figure_width}-column", formats=args.formats)
    except NotARunError as exc:
        raise ScenarioError(f"emulator report: {exc}") from None
    print(f"wrote {path}")
    return EXIT_OK


def _sweep(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from emulator.sweeps import default_sweep_dir, parse_grid, plan_sweep, run_sweep

    overrides = list(args.overrides) + ([f"runtime.address={args.address}"] if args.address else [])
    grid = parse_grid(args.grid)
    out = Path(args.out) if args.out else default_sweep_dir(args.scenario, overrides, args.plugins)
    if out.exists() and any(out.iterdir()):
        raise ScenarioError(f"--out {out}: the directory is not empty; choose a new one")
    runs = plan_sweep(args.scenario, overrides, grid, args.seeds, out, args.plugins)
    from emulator.analysis.figure_style import figure_formats, png_dpi

    try:  # EMULATOR_FIGURE_FORMATS and _DPI, which the sweep's report follows: refused now, not after the runs
        figure_formats(), png_dpi()
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    console = Console(stderr=True)
    console.print(f"sweep: {len(runs)} runs ({len(runs) // args.seeds} grid points x {args.seeds} seeds) -> {out}")
    with Progress(TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[last]}"),
                  TimeElapsedColumn(), console=console, disable=args.quiet) as progress:
        task = progress.add_task("runs", total=len(runs), last="")

        def done(run):
            progress.update(task, advance=1, last=f"{run.name}: {'failed' if run.error else 'done'}")

        result = run_sweep(runs, out, args.parallel, target=args.target, address=args.address, on_done=done)
    for run in result.failed:
        print(f"failed: {run.name}: {run.error}", file=sys.stderr)
    print(f"{len(runs) - len(result.failed)} of {len(runs)} runs finished in {out}"
          + (f"; report: {result.report}" if result.report else ""))
    return EXIT_FAILED if result.failed else EXIT_OK


def entry() -> None:
    """The `emulator` command: main(), then leave at once. By then every file is written and closed and Ray
    is shut down; what remains is the interpreter tearing down torch's and Ray's modules (~0.8 s on a
    2-core machine), which a finished command need not wait for."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
