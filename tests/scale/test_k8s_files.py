"""Static checks of the Kubernetes files (issue 26): nothing here needs a cluster, Docker or Helm.

- ``deploy/Dockerfile``: every COPY source exists in the build context (and is not excluded by its
  ``.dockerignore``), the extras it installs exist in ``pyproject.toml``, the modules it imports exist.
- ``deploy/helm/values.yaml``: parses, and every key is one the pinned chart accepts
  (``deploy/helm/chart-keys.txt``, the documented key list that stands in for the chart's schema);
  the coordinator it names is importable and configured like ``configs/pipeline/dagster.yaml``; the
  Secrets, ConfigMap and volume claim it names are the ones ``deploy/k8s`` and the docs create.
- ``execution.executor: k8s_job``: ``deploy/k8s/pipeline.k8s.yaml`` loads, and its executor config
  passes Dagster's own config validation of dagster-k8s's ``k8s_job_executor`` (skipped with the
  reason when dagster-k8s is not installed).
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl_dagster.deploy.executors import ExecutionSettings, evaluation_executor
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
VALUES = DEPLOY / "helm" / "values.yaml"
CHART_KEYS = DEPLOY / "helm" / "chart-keys.txt"
K8S_SETTINGS = DEPLOY / "k8s" / "pipeline.k8s.yaml"
PINNED_CHART = "1.13.27"


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_dockerfile_copies_only_what_the_repository_has() -> None:
    instructions = _instructions(DOCKERFILE)
    ignored = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    copies = [args for word, args in instructions if word == "COPY"]
    assert copies, "no COPY in the Dockerfile"
    sources = []
    for args in copies:
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        assert not any(p.startswith("--from") for p in shlex.split(args)), "a COPY from another stage or image"
        sources += parts[:-1]
    for source in sources:
        assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the repository (the build context)"
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), f"{source} is .dockerignored"
    # Everything the installed project needs is copied: its packages, its configs and its metadata.
    for needed in ("pyproject.toml", "README.md", "shopsimrl_core", "shopsimrl_dagster", "shopsim_sandbox", "configs"):
        assert any(Path(s).parts[0] == needed for s in sources), f"the image lacks {needed}"
    assert any(word == "FROM" and args.startswith("python:3.11") for word, args in instructions)


def test_the_dockerfile_installs_existing_extras_and_imports_existing_modules() -> None:
    runs = " ".join(args for word, args in _instructions(DOCKERFILE) if word == "RUN")
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installed = re.findall(r'pip install -e "\.\[([^\]]+)\]"', runs)
    assert installed, "the project is not installed (pip install -e .[extras])"
    for extra in installed[0].split(","):
        assert extra in extras, f"extra {extra!r} is not in pyproject.toml"
    assert "k8s" in installed[0].split(","), "the image needs dagster-k8s for K8sRunLauncher and k8s_job_executor"
    imports = re.findall(r'python -c "import ([^"]+)"', runs)
    assert imports
    for module in (m.strip() for m in imports[0].split(",")):
        top = module.split(".")[0]
        if top.startswith("dagster_") and importlib.util.find_spec(top) is None:
            continue  # an optional extra not installed here (dagster-k8s): the image installs it
        assert importlib.util.find_spec(module) is not None, f"the image imports {module}, which does not exist"
    cmd = [args for word, args in _instructions(DOCKERFILE) if word == "CMD"][-1]
    assert "shopsimrl_dagster.definitions" in cmd


def _chart_keys() -> list[str]:
    return [line.strip() for line in CHART_KEYS.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _paths(value: Any, prefix: str = "") -> list[str]:
    """Dotted key paths of every leaf and of every mapping key (list items as ``[]``)."""
    if isinstance(value, dict):
        out = []
        for key, child in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.append(path)
            out += _paths(child, path)
        return out
    if isinstance(value, list):
        return [p for item in value for p in _paths(item, f"{prefix}[]")]
    return []


def _accepted(path: str, keys: list[str]) -> bool:
    for key in keys:
        if key.endswith(".*"):
            base = key[:-2]
            if path == base or path.startswith(base + ".") or path.startswith(base + "["):
                return True
        elif path == key or key.startswith(path + ".") or key.startswith(path + "["):
            return True  # the key itself, or a mapping on the way to one
    return False


def test_the_values_file_uses_only_keys_of_the_pinned_chart() -> None:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    assert f"--version {PINNED_CHART}" in VALUES.read_text(encoding="utf-8")
    keys = _chart_keys()
    unknown = [path for path in _paths(values) if not _accepted(path, keys)]
    assert not unknown, f"keys the chart {PINNED_CHART} does not take (deploy/helm/chart-keys.txt): {unknown}"
    # The key list itself is no catch-all.
    assert not _accepted("dagsterDaemon.runCoordinator.config.customRunCoordinator.klass", keys)
    assert not _accepted("runLauncher.config.k8sRunLauncher.envSecret", keys)


def test_the_values_deploy_the_project_s_queue_launcher_and_image() -> None:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    daemon = values["dagsterDaemon"]
    coordinator = daemon["runCoordinator"]
    assert coordinator["type"] == "CustomRunCoordinator"
    custom = coordinator["config"]["customRunCoordinator"]
    cls = getattr(importlib.import_module(custom["module"]), custom["class"])
    template = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "dagster.yaml").read_text(encoding="utf-8"))
    assert (template["run_coordinator"]["module"], template["run_coordinator"]["class"]) == (custom["module"],
                                                                                               custom["class"])
    assert custom["config"] == template["run_coordinator"]["config"], "the chart's queue differs from dagster.yaml"
    # The config is one the coordinator class accepts (Dagster's config validation of its schema).
    from dagster._config import process_config, resolve_to_config_type

    assert process_config(resolve_to_config_type(cls.config_type()), custom["config"]).success
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    monitoring, retries = daemon["runMonitoring"], daemon["runRetries"]
    assert monitoring["enabled"] and retries["enabled"] and retries["retryOnAssetOrOpFailure"] is False
    # One image for webserver, daemon and the user deployment (the coordinator must be importable in each).
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert values["dagsterWebserver"]["image"] == daemon["image"] == deployment["image"]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "shopsimrl_dagster.definitions"]
    # The settings every process reads, the inference key and the runs root.
    for env in (values["dagsterWebserver"]["env"], daemon["env"], deployment["env"]):
        assert {"name": "SHOPSIMRL_PIPELINE_CONFIG", "value": "/etc/shopsimrl/pipeline.yaml"} in env
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert {"name": "shopsimrl-inference"} in launcher["envSecrets"]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in launcher["volumes"] if "persistentVolumeClaim" in v}
    manifests = [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml")) if path != K8S_SETTINGS
                 for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    assert claims <= {d["metadata"]["name"] for d in manifests if d["kind"] == "PersistentVolumeClaim"}
    services = {d["metadata"]["name"] for d in manifests if d["kind"] == "Service"}
    settings = yaml.safe_load(K8S_SETTINGS.read_text(encoding="utf-8"))
    for url in [settings["environment"]["base_url"], *settings["environment"]["base_urls"],
                settings["inference"]["base_url"]]:
        host = url.split("://", 1)[1].split(":", 1)[0].split(".", 1)[0]
        assert host in services, f"{url}: no Service {host} in deploy/k8s"
    docs = (REPO_ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    for name in ("shopsimrl-inference", "shopsimrl-postgresql", "shopsimrl-pipeline"):
        assert f"create secret generic {name}" in docs or f"create configmap {name}" in docs, name


def _k8s_settings(tmp_path: Path) -> Path:
    """deploy/k8s/pipeline.k8s.yaml with its cluster paths moved under *tmp_path* (loadable here)."""
    document = yaml.safe_load(K8S_SETTINGS.read_text(encoding="utf-8"))
    document.update(runs_root=str(tmp_path / "runs"), checkpoint_registry=str(tmp_path / "runs" / "checkpoints"),
                    split_file=str(REPO_ROOT / "configs" / "persona_splits.v1.json"))
    document["inference"]["launch"]["state_dir"] = str(tmp_path / "servers")
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_the_k8s_settings_load_and_their_gpu_story_matches_the_pool(tmp_path: Path) -> None:
    settings = load_pipeline_settings(_k8s_settings(tmp_path))
    execution = settings.execution
    assert execution.executor == "k8s_job"
    launch = settings.inference.launch
    assert launch is not None and settings.inference.mode == "launch"
    # Each rollout step pod gets exactly the GPUs one launched server uses, and only rollout steps get GPUs.
    per_step = execution.k8s["per_step_k8s_config"]
    assert set(per_step) == {f"{suite}__rollout_traces" for suite in settings.suites}
    for config in per_step.values():
        limits = config["container_config"]["resources"]["limits"]
        serve = launch.core()
        assert int(limits["nvidia.com/gpu"]) == serve.gpus_per_server == len(serve.gpus)
    # Device locks are per pod (every pod's first GPU is "0"): the state dir is not on the shared runs volume.
    raw = yaml.safe_load(K8S_SETTINGS.read_text(encoding="utf-8"))
    assert not raw["inference"]["launch"]["state_dir"].startswith(raw["runs_root"])
    mounts = execution.k8s["step_k8s_config"]["container_config"]["volume_mounts"]
    assert any(raw["inference"]["launch"]["state_dir"].startswith(m["mount_path"]) for m in mounts)


def test_the_k8s_job_executor_config_passes_dagster_s_validation(tmp_path: Path) -> None:
    pytest.importorskip("dagster_k8s", reason="dagster-k8s is not installed (pip install -e '.[k8s]')")
    from dagster._config import process_config
    from dagster_k8s import k8s_job_executor

    execution = load_pipeline_settings(_k8s_settings(tmp_path)).execution
    result = process_config(k8s_job_executor.config_schema.config_type, execution.k8s)
    assert result.success, [e.message for e in (result.errors or [])]
    assert evaluation_executor(execution).name == "k8s_job"
    # A misspelt key is refused by the same validation.
    bad = process_config(k8s_job_executor.config_schema.config_type, {**execution.k8s, "job_namespaces": "x"})
    assert not bad.success
    from shopsimrl_core import ConfigError

    with pytest.raises(ConfigError, match="execution.k8s: .*job_namespaces"):
        evaluation_executor(ExecutionSettings(executor="k8s_job", k8s={"job_namespaces": "x"}))


def test_k8s_job_without_dagster_k8s_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from shopsimrl_core import ConfigError

    monkeypatch.setitem(sys.modules, "dagster_k8s", None)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[k8s\]'"):
        evaluation_executor(ExecutionSettings(executor="k8s_job"))


@pytest.mark.slow
def test_dg_check_defs_loads_the_location_with_the_k8s_executor(tmp_path: Path) -> None:
    pytest.importorskip("dagster_k8s", reason="dagster-k8s is not installed (pip install -e '.[k8s]')")
    dg_cli = Path(sys.executable).parent / "dg"
    if not dg_cli.exists():
        pytest.skip("dagster-dg-cli is not installed")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "SHOPSIMRL_PIPELINE_CONFIG": str(_k8s_settings(tmp_path)), "DAGSTER_HOME": str(tmp_path)}
    result = subprocess.run([str(dg_cli), "check", "defs"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # ... and refuses a misspelt executor key (validated when the definitions load).
    path = Path(env["SHOPSIMRL_PIPELINE_CONFIG"])
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["execution"]["k8s"]["job_namespaces"] = "x"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    result = subprocess.run([str(dg_cli), "check", "defs"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0 and "job_namespaces" in result.stdout + result.stderr
