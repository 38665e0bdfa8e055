"""Ray's token authentication: on for every run, set up the way Ray documents it, and silent.

Ray 2.60 turns token authentication on by itself for a local instance and then warns about it on every
start. The emulator sets RAY_AUTH_MODE=token itself, with the token in ~/.ray/auth_token (written once per
user, mode 0600, when missing), so the warning goes and authentication stays. The subprocess tests run with
HOME in a temporary directory, so they start from a user who has no token yet and leave the real one alone.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from emulator.runtime import cluster
from emulator.runtime.cluster import configure_token_auth

ROOT = Path(__file__).resolve().parents[1]
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _fresh_user_env(home: Path) -> dict:
    """The environment of a user with no token and no RAY_AUTH_* settings. RAY_ADDRESS=local: a new local
    instance, even while another process's `ray start` (or ray.cluster_utils) cluster runs on this machine,
    which ray.init() would otherwise join."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARIABLES}
    env.update(HOME=str(home), RAY_ADDRESS="local")
    return env


def _mentions_auth(text: str) -> list[str]:
    return [line for line in text.splitlines() if "token" in line.lower() or "authenticat" in line.lower()]


def test_a_run_prints_no_auth_warning_and_writes_a_private_token(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "tiny", "seed": 0, "rounds": 1,
        "data": {"dataset": "synthetic", "synthetic": {"iid": True, "max_samples": 50}},
        "model": "logreg", "population": {"devices": 10},
        "algorithm": {"name": "fedavg", "clients_per_round": 2, "client_lr": 0.05, "local_steps": 1,
                      "batch_size": 8},
        "runtime": {"runners": 1},
    }))
    proc = subprocess.run([sys.executable, "-m", "emulator", "run", str(scenario), "--out", str(tmp_path / "run"),
                           "--quiet"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=_fresh_user_env(home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _mentions_auth(proc.stderr), proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"
    token = home / ".ray" / "auth_token"
    assert len(token.read_text().strip()) == 64  # 256 bits in hex, as `ray get-auth-token --generate` makes
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


PROBE = textwrap.dedent("""
    import sys
    from ray._raylet import GcsClient
    try:
        GcsClient(address=sys.argv[1]).internal_kv_keys(b"", namespace=None, timeout=10)
        print("accepted")
    except Exception as exc:
        print(type(exc).__name__)
""")

SESSION = textwrap.dedent("""
    import json, os, subprocess, sys
    import ray
    from ray._raylet import AuthenticationMode, get_authentication_mode
    from emulator.runtime.cluster import ray_session

    with ray_session():
        address = ray.get_runtime_context().gcs_address
        def probe(**env):
            child = {**os.environ, "RAY_gcs_rpc_server_connect_timeout_s": "5", **env}
            out = subprocess.run([sys.executable, "-c", sys.argv[1], address], env=child, capture_output=True,
                                 text=True, timeout=120)
            return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
        print(json.dumps({
            "token_mode": get_authentication_mode() == AuthenticationMode.TOKEN,
            "remote_task": ray.get(ray.remote(lambda: os.environ.get("RAY_AUTH_MODE")).remote()),
            "with_the_token": probe(),
            "without_a_token": probe(RAY_AUTH_MODE="disabled"),
            "with_a_wrong_token": probe(RAY_AUTH_TOKEN="0" * 64),
        }))
""")


def test_the_local_instance_refuses_clients_without_the_token(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-c", SESSION, PROBE], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=_fresh_user_env(home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _mentions_auth(proc.stderr), proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"token_mode": True, "remote_task": "token", "with_the_token": "accepted",
                    "without_a_token": "AuthenticationError", "with_a_wrong_token": "AuthenticationError"}


@pytest.fixture
def no_auth_settings(monkeypatch, tmp_path):
    """A user without a token or RAY_AUTH_* settings; os.environ is restored afterwards, and Ray's cached
    config in this process (which the session's Ray instance uses) is not reloaded."""
    for name in (*AUTH_VARIABLES, "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(cluster, "_reload_ray_config", lambda: None)
    return tmp_path / ".ray" / "auth_token"


def test_an_explicit_choice_is_left_alone(no_auth_settings, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert configure_token_auth() == "disabled"
    assert os.environ["RAY_AUTH_MODE"] == "disabled" and not no_auth_settings.exists()


def test_an_existing_token_is_used_not_replaced(no_auth_settings):
    no_auth_settings.parent.mkdir()
    no_auth_settings.write_text("mine")
    assert configure_token_auth() == "token" and os.environ["RAY_AUTH_MODE"] == "token"
    assert no_auth_settings.read_text() == "mine"


def test_a_token_from_the_environment_needs_no_file(no_auth_settings, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert configure_token_auth("10.0.0.1:6379") == "token"
    assert not no_auth_settings.exists()


def test_a_remote_cluster_without_a_token_here_is_left_to_ray(no_auth_settings, monkeypatch):
    assert configure_token_auth("10.0.0.1:6379") is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # where ray.init() without an address goes
    assert configure_token_auth() is None
    assert "RAY_AUTH_MODE" not in os.environ and not no_auth_settings.exists()


def test_token_mode_without_a_token_gets_a_private_one(no_auth_settings, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert configure_token_auth() == "token"
    assert stat.S_IMODE(no_auth_settings.stat().st_mode) == 0o600


def test_a_local_instance_gets_a_token_once(no_auth_settings):
    assert configure_token_auth("auto") == "token"
    first = no_auth_settings.read_text()
    assert configure_token_auth() == "token" and no_auth_settings.read_text() == first
    assert stat.S_IMODE(no_auth_settings.stat().st_mode) == 0o600
    assert stat.S_IMODE(no_auth_settings.parent.stat().st_mode) == 0o700
    assert [p.name for p in no_auth_settings.parent.iterdir()] == ["auth_token"]  # no temporary file left
