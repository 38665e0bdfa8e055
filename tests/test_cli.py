"""The command line helps like a good CLI: examples in every --help, no option abbreviated into another,
"did you mean" for a misspelt key, value or part name, every problem of a scenario at once, and
`emulator parts` listing what is registered. Nothing here starts Ray."""
import argparse
import re
import shlex
import textwrap
from pathlib import Path

import pytest

import emulator
from emulator import registry
from emulator.cli import _parser, main
from emulator.scenario import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = [value for value in vars(registry).values() if isinstance(value, registry.Registry)]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def every_parser() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    return {"": parser, **subparsers(parser)}


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*([command] if command else []), "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ --help
@pytest.mark.parametrize("command", sorted(every_parser()))
def test_every_help_shows_examples_that_parse_and_points_to_docs_that_exist(command, capsys):
    text = help_of(command, capsys)
    assert "examples:" in text, text
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith("emulator ")]
    assert examples, text
    for line in examples:
        words = shlex.split(line.split("  #")[0])[1:]
        _parser().parse_args(words)  # an example that no longer parses exits 2 here
        for word in words:
            if word.endswith(".yaml"):
                assert (ROOT / word).is_file(), f"{line}: {word} is not a shipped scenario"
    assert "\ndocs: " in text, f"emulator {command} --help points to no documentation"
    docs = re.findall(r"[\w/.-]+\.md", text[text.index("\ndocs: "):])
    assert docs, f"emulator {command} --help points to no documentation"
    for doc in docs:
        assert (ROOT / doc).is_file(), f"{doc} named by emulator {command} --help does not exist"


def test_the_main_help_shows_the_commands_everyday_examples(capsys):
    text = help_of("", capsys)
    for example in ("emulator run scenarios/quickstart.yaml --set rounds=10", "emulator run --resume RUN_DIR",
                    "emulator report runs/*", "emulator validate scenarios/quickstart.yaml", "emulator parts"):
        assert example in text, example


# ------------------------------------------------------------------------------------------ abbreviations
def _value_for(action: argparse.Action) -> list[str]:
    """A value the option accepts (so that only the abbreviation could make the line wrong)."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    for candidate in ("1", "0.5", "png", "x"):
        try:
            (action.type or str)(candidate)
            return [candidate]
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    raise AssertionError(f"no value found for {action.option_strings}")


def _minimal_line(parser: argparse.ArgumentParser) -> list[str]:
    """The positionals and required options a parser needs, filled in."""
    line = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            line.append("down")
        elif not action.option_strings and action.nargs != "?":
            line.append("x")
        elif action.required:
            line += [action.option_strings[0], *_value_for(action)]
    return line


def abbreviations() -> list[tuple[str, str, list[str]]]:
    """(command, abbreviation, command line) for every strict prefix of every long option of every parser."""
    cases = []
    for command, parser in every_parser().items():
        options = {s for a in parser._actions for s in a.option_strings}
        for action in parser._actions:
            for option in (s for s in action.option_strings if s.startswith("--")):
                for end in range(3, len(option)):
                    prefix = option[:end]
                    if prefix not in options:
                        line = [*([command] if command else []), prefix, *_value_for(action), *_minimal_line(parser)]
                        cases.append((command, prefix, line))
    return cases


def test_every_long_option_of_every_command_is_covered():
    covered = {(command, prefix.rstrip("-")[:3]) for command, prefix, _ in abbreviations()}
    assert ("run", "--q") in covered and ("report", "--t") in covered and ("", "--h") in covered
    assert len({command for command, _, _ in abbreviations()}) == len(every_parser())


@pytest.mark.parametrize("command", sorted(every_parser()))
def test_an_abbreviated_option_is_refused(command, capsys):
    """`run --qu` is not `run --quiet`, `report --t 0.8` not `--target` nor `--title`: exit 2, naming it."""
    for _, prefix, line in (case for case in abbreviations() if case[0] == command):
        with pytest.raises(SystemExit) as exit_:
            _parser().parse_args(line)
        assert exit_.value.code == 2, f"emulator {shlex.join(line)} was accepted"
        assert f"unrecognized arguments: {prefix}" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(subparsers(_parser())))
def test_an_abbreviated_command_is_refused(command, capsys):
    for end in range(1, len(command)):
        if command[:end] in subparsers(_parser()):
            continue
        with pytest.raises(SystemExit) as exit_:
            _parser().parse_args([command[:end], *_minimal_line(subparsers(_parser())[command])])
        assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ did you mean
def misspelt(name: str) -> str:
    return name + name[-1]  # one letter typed twice


@pytest.mark.parametrize("kind", REGISTRIES, ids=lambda r: r.kind)
def test_a_misspelt_part_name_suggests_the_registered_one(kind):
    if not kind.names():
        pytest.skip(f"no {kind.kind} is registered: no name to misspell")
    for name in kind.names():
        if misspelt(name) in kind:
            continue
        message = kind.unknown(misspelt(name))
        assert f"did you mean {name!r}" in message, message
        assert f"not a registered {kind.kind}" in message


def test_a_name_close_to_nothing_gets_no_suggestion():
    assert "did you mean" not in registry.ALGORITHMS.unknown("qqqqqqqq")


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def refused(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    return capsys.readouterr().err


def test_misspelt_keys_values_and_parts_in_a_file_get_suggestions(tmp_path, capsys):
    path = write(tmp_path, """\
        name: x
        rounds: 3
        data: {dataset: mnsit, partition: {scheme: dirichlet, alpah: 0.3}}
        model: mpl
        algorithm: {name: fedavg, client_lrr: 0.1, selection: {kind: unifrm}}
        population: {devices: 10, availability: [{kind: markv}]}
        system: {model: simulatd}
        compression: {kind: topk}
    """)
    err = refused(capsys, "validate", str(path))
    for where, suggestion in [("data.dataset", "mnist"), ("data.partition.alpah", "alpha"), ("model.name", "mlp"),
                              ("algorithm.client_lrr", "client_lr"),
                              ("algorithm.selection.kind", "uniform"), ("population.availability", "markov"),
                              ("system.model", "simulated"), ("compression.kind", "top_k")]:
        line = next((line for line in err.splitlines() if line.strip().startswith(where)), None)
        assert line is not None, f"{where} not reported:\n{err}"
        assert f"did you mean {suggestion!r}" in line, line
    err = refused(capsys, "validate", str(path), "--set", "algorithm.name=fedvg")
    assert "algorithm.name: 'fedvg' is not a registered algorithm" in err and "did you mean 'fedavg'" in err


def test_a_misspelt_set_key_gets_a_suggestion(tmp_path, capsys):
    path = write(tmp_path, "name: x\nrounds: 3\n")
    assert "did you mean 'population'" in refused(capsys, "validate", str(path), "--set", "populaton[0]=1")


# -------------------------------------------------------------------------------- every problem at once
INDEPENDENT = {
    "top level and sections": ("""\
        name: x
        rounds: "3"
        seed: true
        data: {dataset: synthetic, fo: 1}
        algorithm: {name: fedvg}
    """, ["rounds:", "seed:", "data.fo:", "algorithm.name:"]),
    "within one section": ("""\
        name: x
        rounds: 3
        population: {devices: "10", bogus: 1, availability: [{kind: markv}]}
        algorithm: {name: fedavg, client_lr: -1, local_steps: true}
    """, ["population.devices:", "population.bogus:", "population.availability", "algorithm.client_lr:",
          "algorithm.local_steps:"]),
    "nested sections": ("""\
        name: x
        rounds: 3
        data: {partition: {scheme: dirichlet, alpha: true, balanced: 3}}
        evaluation: {every: "5"}
        model: vgg
    """, ["data.partition.alpha:", "data.partition.balanced:", "evaluation.every:", "model.name:"]),
}


@pytest.mark.parametrize("case", sorted(INDEPENDENT))
def test_validate_and_run_report_every_independent_problem_each_on_its_line(case, tmp_path, capsys):
    text, wheres = INDEPENDENT[case]
    path = write(tmp_path, text)
    for command in ("validate", "run"):
        err = refused(capsys, command, str(path))
        assert f"{len(wheres)} problems:" in err, err
        lines = [line.strip() for line in err.splitlines()[1:]]
        for where in wheres:
            assert sum(line.startswith(where) for line in lines) == 1, f"{where}:\n{err}"


def test_the_python_api_raises_every_problem_too():
    with pytest.raises(ScenarioError) as err:
        emulator.run({"name": "x", "rounds": "3", "seed": True, "model": "mpl", "data": {"fo": 1}})
    message = str(err.value)
    assert "4 problems:" in message
    for where in ("rounds:", "seed:", "model.name:", "data.fo:"):
        assert f"\n  {where}" in message, message


def test_a_cross_section_check_still_runs_once_the_sections_are_valid(tmp_path, capsys):
    path = write(tmp_path, "name: x\nrounds: 3\nalgorithm: {clients_per_round: 50}\npopulation: {devices: 10}\n")
    assert "algorithm.clients_per_round" in refused(capsys, "validate", str(path))


# ---------------------------------------------------------------------------------------- emulator parts
def plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def part_lines(out: str) -> dict[tuple[str, str], str]:
    """{(kind, name): the rest of its line} from `emulator parts`' output."""
    parts, kind = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            kind = line.split(" (")[0]
        elif line.strip():
            name, _, rest = line.strip().partition(" ")
            parts[(kind, name)] = rest.strip()
    return parts


def test_parts_lists_every_registered_part_with_its_origin_and_a_description(capsys):
    assert main(["parts"]) == 0
    out = capsys.readouterr().out
    for header in ("algorithms (algorithm.name)", "datasets (data.dataset)",
                   "availability models (population.availability[].kind)"):
        assert f"\n{header}\n" in f"\n{out}", header  # where a scenario names them
    parts = part_lines(out)
    for kind in REGISTRIES:
        for name in kind.names():
            line = parts.get((plural(kind.kind), name))
            assert line is not None, f"{kind.kind} {name} missing"
            if kind.get(name).origin.startswith("emulator."):
                assert line.startswith("built-in "), line
                assert len(line.removeprefix("built-in").strip()) > 10, f"{kind.kind} {name}: no description"


PLUGIN = '''\
    from typing import Literal
    from emulator.extend import FedAvg, FedAvgConfig, register_algorithm

    class ZigzagConfig(FedAvgConfig):
        """Zigzag: FedAvg that averages twice.

        More text that is not the summary."""
        name: Literal["{name}"] = "{name}"

    register_algorithm("{name}", FedAvg, config=ZigzagConfig)
'''


def test_parts_lists_a_plugins_parts_under_the_plugins_module(tmp_path, monkeypatch, capsys):
    write(tmp_path, PLUGIN.replace("{name}", "zigzag_cli"), "zigzag_cli_plugin.py")
    monkeypatch.chdir(tmp_path)
    assert main(["parts", "--plugin", "zigzag_cli_plugin"]) == 0
    line = part_lines(capsys.readouterr().out)[("algorithms", "zigzag_cli")]
    assert line.split() == ["zigzag_cli_plugin", "Zigzag:", "FedAvg", "that", "averages", "twice."]


def test_parts_loads_the_plugins_a_scenario_names_beside_it(tmp_path, capsys):
    home = tmp_path / "lab"
    home.mkdir()
    write(home, PLUGIN.replace("{name}", "zigzag_beside"), "zigzag_beside_plugin.py")
    scenario = write(home, "name: x\nrounds: 3\nplugins: [zigzag_beside_plugin]\nalgorithm: {name: zigzag_beside}\n")
    assert main(["parts", str(scenario)]) == 0
    assert part_lines(capsys.readouterr().out)[("algorithms", "zigzag_beside")].startswith("zigzag_beside_plugin ")


def test_parts_with_a_plugin_that_does_not_import_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert "no_such_plugin_module" in refused(capsys, "parts", "--plugin", "no_such_plugin_module")
