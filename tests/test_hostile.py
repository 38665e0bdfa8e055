"""Input that is not a scenario at all, and command options out of range: exit code 2 and one line that
names the file or option and what is wrong, never a traceback (issue 26). Everything here is refused before
a run directory, Ray or any data exists, so it runs in process and in well under a second a case.
"""
from __future__ import annotations

import os

import pytest

from conftest import ROOT
from emulator.cli import main

QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))


def write(tmp_path, name: str, content: bytes | str):
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


HOSTILE_FILES = {  # name: (content, what the message must say)
    "random_bytes.yaml": (bytes(range(256)) * 4, "not a text file: byte 0x80 at offset 128 is not UTF-8"),
    "latin1.yaml": ("name: caf\xe9\nrounds: 3\n".encode("latin-1"), "is not UTF-8"),
    "nul_bytes.yaml": (b"name: x\x00\nrounds: 3\n", "holds NUL bytes"),
    "billion_laughs.yaml": (LAUGHS, "expands to more than 100,000 values"),
    "self_alias.yaml": ("name: loop\nrounds: &r [*r]\n", "more than 64 levels deep (or a YAML alias refers to itself)"),
    "deep_200.yaml": ("name: x\nrounds: " + "[" * 200 + "]" * 200 + "\n", "more than 64 levels deep"),
    "deep_20000.yaml": ("name: x\nrounds: " + "[" * 20000 + "]" * 20000 + "\n", "too deeply to read"),
    "huge.yaml": ("#" * (5 * 2 ** 20), "5.0 MiB is not a scenario file"),
    "rounds_beyond_reach.yaml": ("name: far\nrounds: 100000000000000000000000\n", "rounds"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_a_file_that_is_not_a_scenario_is_one_line_and_exit_2(name, tmp_path, capsys):
    content, expected = HOSTILE_FILES[name]
    path = write(tmp_path, name, content)
    for command in (["validate", path], ["run", path, "--out", str(tmp_path / "run"), "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert expected in err and path in err or name == "rounds_beyond_reach.yaml" and expected in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert not os.path.exists(tmp_path / "run")  # refused before a run directory existed


def test_a_directory_given_as_the_scenario_is_named_as_such(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory, not a scenario file" in capsys.readouterr().err


def test_a_set_value_that_nests_without_end_is_refused_like_a_file(capsys):
    assert main(["validate", QUICKSTART, "--set", "rounds=" + "[" * 100 + "]" * 100]) == 2
    err = capsys.readouterr().err
    assert "--set 'rounds=[[[" in err and "more than 64 levels deep" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,expected", [
    (["report", "RUN", "--out", "OUT", "--target", "2"], "argument --target: 2 is not a test accuracy"),
    (["report", "RUN", "--out", "OUT", "--target", "-1"], "argument --target: -1 is not a test accuracy"),
    (["report", "RUN", "--out", "OUT", "--target", "most"], "argument --target: 'most' is not a number"),
    (["report", "RUN", "--out", "OUT", "--last", "0"], "argument --last: 0 is too small: at least 1"),
    (["sweep", QUICKSTART, "--parallel", "0"], "argument --parallel: 0 is too small: at least 1"),
    (["sweep", QUICKSTART, "--seeds", "-2"], "argument --seeds: -2 is too small: at least 1"),
    (["sweep", QUICKSTART, "--target", "1.5"], "argument --target: 1.5 is not a test accuracy"),
    (["up", "--runners", "0"], "argument --runners: 0 is too small: at least 1"),
], ids=["target-2", "target-negative", "target-word", "last-0", "parallel-0", "seeds-negative", "sweep-target",
        "up-runners-0"])
def test_command_options_out_of_range_exit_2_naming_the_option(argv, expected, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


def test_the_report_api_refuses_a_target_that_is_not_an_accuracy(tmp_path):
    from emulator.analysis.report import write_report
    from emulator.analysis.runs import NotARunError

    with pytest.raises(NotARunError, match="target 2: not a test accuracy"):
        write_report([tmp_path], tmp_path / "out", target=2)


def test_validate_prints_what_the_scenario_will_hold_in_memory_and_says_when_it_cannot_fit(capsys):
    """The estimate is made from the scenario alone (issue 26): Fashion-MNIST's 70,000 images twice (the
    driver's copy and Ray's object store), FAST's CNN (1,199,882 parameters) in 6 float32 copies per Adam
    runner, the server's 6; a population of 10^8 devices is more than any test machine holds."""
    from emulator.system.footprint import estimate
    from emulator.parts import load_scenario

    fast = str(ROOT / "scenarios" / "papers" / "fast_fmnist.yaml")
    parts = estimate(load_scenario(fast, ["runtime.runners=3"])).parts
    assert parts["data (driver and object store)"] == 2 * 70000 * (784 * 4 + 8)
    assert parts["3 runners' training"] == 3 * 6 * 1199882 * 4 and parts["server"] == 6 * 1199882 * 4
    assert main(["validate", fast, "--set", "runtime.runners=3"]) == 0
    err = capsys.readouterr().err
    assert "# memory: about 530 MiB (population 0 MiB, data (driver and object store) 420 MiB, 3 runners' " \
           "training 82 MiB, server 27 MiB); this machine has" in err, err
    assert main(["validate", QUICKSTART, "--set", "population.devices=100000000", "--set", "data.store=memory"]) == 0
    assert "GiB (not enough: lower population.devices or the data" in capsys.readouterr().err
    # on disk (data.store: auto at this size) the data is counted against the cache's free disk instead
    assert main(["validate", QUICKSTART, "--set", "population.devices=100000000"]) == 0
    err = capsys.readouterr().err
    assert "the data on disk, memory-mapped: up to " in err and "# disk: the data cache " in err, err
    assert "(perhaps not enough: point data.store.cache at a larger disk" in err, err  # 10^8 x 80 samples
