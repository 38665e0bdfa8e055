"""`emulator run | validate`: the command line. Bad input exits with code 2 and a message, never a traceback."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emulator.scenario import ScenarioError, load_scenario

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="emulator", description="Cross-device federated learning emulator.")
    commands = parser.add_subparsers(dest="command", required=True)

    def scenario_args(p):
        p.add_argument("scenario", help="scenario YAML file")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a field, e.g. --set rounds=50 --set algorithm.client_lr=0.1 (repeatable)")

    run = commands.add_parser("run", help="run a scenario")
    scenario_args(run)
    run.add_argument("--out", help="run directory (default: OUTPUT_DIR/NAME-TIMESTAMP)")
    run.add_argument("--address", help="Ray cluster address (overrides runtime.address)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    validate = commands.add_parser("validate", help="check a scenario file and print it resolved")
    scenario_args(validate)
    validate.add_argument("--quiet", action="store_true", help="print nothing when the file is valid")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args)
        return _run(args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("\ninterrupted: every finished round is saved in the run directory", file=sys.stderr)
        return EXIT_INTERRUPTED


def _validate(args) -> int:
    from emulator.scenario import dump_scenario

    scenario = load_scenario(args.scenario, args.overrides)
    if not args.quiet:
        print(dump_scenario(scenario), end="")
        print(f"# {args.scenario}: valid", file=sys.stderr)
    return EXIT_OK


def _run(args) -> int:
    overrides = list(args.overrides)
    if args.address:
        overrides.append(f"runtime.address={args.address}")
    scenario = load_scenario(args.scenario, overrides)

    from emulator.driver import run_scenario
    from emulator.progress import RunProgress, format_duration

    with RunProgress(scenario, enabled=not args.quiet) as progress:
        result = run_scenario(scenario, args.out, on_round=progress.update)
    summary = result.summary
    parts = [f"{scenario.name}: {summary['rounds_completed']} rounds"]
    if summary.get("final_test_acc") is not None:
        parts.append(f"test accuracy {summary['final_test_acc']:.4f}")
    parts.append(f"simulated {format_duration(summary['sim_time_s'])}")
    parts.append(f"{(summary['bytes_down'] + summary['bytes_up']) / 1e6:.1f} MB")
    parts.append(f"wall {summary['wall_time_s']:.1f} s")
    print(", ".join(parts) + f" -> {Path(result.path)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
