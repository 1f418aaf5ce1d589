"""Every launcher of a Dagster daemon or webserver sets the gRPC timeouts of configs/pipeline/dagster.env (issue 24).

Dagster 1.13 reads its sensor, schedule and general code-server timeouts only from the environment of the
calling process (60 s by default, too short on a loaded machine). The file is the one place they are set; the
two scripts load it, the Makefile exports it, and the Helm values and the image repeat it. Each launcher is
checked by running its own loading code where it is shell or make, and by parsing it where it is YAML or a
Dockerfile.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = REPO_ROOT / "configs" / "pipeline" / "dagster.env"
NEEDED = ("DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS", "DAGSTER_SCHEDULE_GRPC_TIMEOUT_SECONDS")
#: Dagster's own default for all three (dagster._grpc.utils); the shipped values must be above it
DAGSTER_DEFAULT_S = 60


def _declared() -> dict[str, str]:
    values = {}
    for number, line in enumerate(ENV_FILE.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"(DAGSTER_[A-Z_]+)=([0-9]+)", line)
        assert match, f"{ENV_FILE.name}:{number}: not a KEY=integer line: {line!r}"
        values[match[1]] = match[2]
    return values


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not (k.startswith("DAGSTER_") and k.endswith("TIMEOUT_SECONDS"))}


def test_the_file_sets_both_evaluation_timeouts_above_dagster_s_default() -> None:
    declared = _declared()
    assert set(NEEDED) <= set(declared), declared
    assert all(int(value) > DAGSTER_DEFAULT_S for value in declared.values()), declared


def test_the_installed_dagster_reads_these_names() -> None:
    code = ("from dagster._grpc.utils import default_grpc_timeout as g, default_schedule_grpc_timeout as c, "
            "default_sensor_grpc_timeout as s; print(g(), c(), s())")
    env = {**_clean_env(), **_declared()}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    declared = _declared()
    assert out.stdout.split() == [declared["DAGSTER_GRPC_TIMEOUT_SECONDS"], declared[NEEDED[1]], declared[NEEDED[0]]]


def _loader(script: Path) -> str:
    """The lines of *script* that load the file (its while-read loop), checked to run before any dagster command."""
    text = script.read_text(encoding="utf-8")
    match = re.search(r"^while IFS='=' read -r key value; do\n.*?\ndone < \S*configs/pipeline/dagster\.env\"?$",
                      text, flags=re.M | re.S)
    assert match, f"{script.name} does not load configs/pipeline/dagster.env"
    loaded_at = text[: match.end()].count("\n")
    starts = [number for number, line in enumerate(text.splitlines())
              if not line.lstrip().startswith("#") and re.search(r"dagster(-daemon|-webserver)?\"? (dev|run|-w)", line)]
    assert starts and min(starts) > loaded_at, f"{script.name} starts Dagster (lines {starts}) before loading the file"
    return match[0]


@pytest.mark.parametrize("script", ["dagster-dev.sh", "local-cluster.sh"])
def test_the_scripts_export_the_file_and_keep_a_value_already_set(script: str) -> None:
    loader = _loader(REPO_ROOT / "scripts" / script).replace('"$REPO/', f'"{REPO_ROOT}/')
    body = f"set -euo pipefail\ncd '{REPO_ROOT}'\n{loader}\nenv"
    env = {**_clean_env(), NEEDED[1]: "999"}
    out = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True, check=True).stdout
    exported = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("DAGSTER_") and "=" in line)
    assert exported[NEEDED[0]] == _declared()[NEEDED[0]]
    assert exported[NEEDED[1]] == "999"
    assert {k: exported[k] for k in _declared() if k != NEEDED[1]} == {
        k: v for k, v in _declared().items() if k != NEEDED[1]}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_every_make_target_runs_with_the_file_s_values(tmp_path: Path) -> None:
    probe = tmp_path / "probe.mk"
    probe.write_text("probe:\n\t@env\n", encoding="utf-8")
    out = subprocess.run(["make", "-s", "-f", "Makefile", "-f", str(probe), "probe"], cwd=REPO_ROOT,
                         env=_clean_env(), capture_output=True, text=True, check=True).stdout
    exported = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("DAGSTER_") and "=" in line)
    assert {k: exported.get(k) for k in _declared()} == _declared()


def test_the_helm_daemon_and_webserver_and_the_image_carry_the_same_values() -> None:
    values = yaml.safe_load((REPO_ROOT / "deploy" / "helm" / "values.yaml").read_text(encoding="utf-8"))
    for component in ("dagsterDaemon", "dagsterWebserver"):
        env = {item["name"]: item.get("value") for item in values[component]["env"]}
        assert {k: env.get(k) for k in _declared()} == _declared(), component
    dockerfile = (REPO_ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    env_lines = " ".join(line for line in dockerfile.splitlines() if line.startswith("ENV "))
    image = dict(re.findall(r"\b(DAGSTER_[A-Z_]+)=(\S+)", env_lines))
    assert {k: image.get(k) for k in _declared()} == _declared()
