"""Static checks of the Kubernetes files (issue 26): nothing here needs a cluster, Docker or Helm.

- ``deploy/Dockerfile``: every COPY source exists in the build context (and is not excluded by its
  ``.dockerignore``), the extras it installs exist in ``pyproject.toml``, the modules it imports exist.
- ``deploy/helm/values.yaml``: parses, and passes the pinned chart's schema as Helm would apply it to
  our values merged with the chart's defaults (``deploy/helm/chart-schema-1.13.json``, derived from the
  chart's ``values.schema.json`` by ``scripts/derive_chart_schema.py``): every key exists where the
  schema closes an object, types and enum values match, required keys are ours where the chart's
  defaults are not bound to hold them, and a ``type`` comes with the sub-object it requires. The
  coordinator it names is importable and configured like ``configs/pipeline/dagster.yaml``; the
  Secrets, ConfigMap and volume claim it names are the ones ``deploy/k8s`` and the docs create.
- ``execution.executor: k8s_job``: ``deploy/k8s/pipeline.k8s.yaml`` loads, and its executor config
  passes Dagster's own config validation of dagster-k8s's ``k8s_job_executor`` (skipped with the
  reason when dagster-k8s is not installed).
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from shopsimrl_dagster.deploy.executors import ExecutionSettings, evaluation_executor
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
VALUES = DEPLOY / "helm" / "values.yaml"
CHART_SCHEMA = DEPLOY / "helm" / "chart-schema-1.13.json"
DERIVE_SCRIPT = REPO_ROOT / "scripts" / "derive_chart_schema.py"
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


def _chart_schema_tool() -> ModuleType:
    """scripts/derive_chart_schema.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("derive_chart_schema", DERIVE_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chart_paths() -> dict[str, dict[str, Any]]:
    derived = json.loads(CHART_SCHEMA.read_text(encoding="utf-8"))
    assert derived["meta"]["chart"] == "dagster" and derived["meta"]["chart_version"] == PINNED_CHART
    return derived["paths"]


def _values() -> dict[str, Any]:
    return yaml.safe_load(VALUES.read_text(encoding="utf-8"))


def test_the_chart_schema_file_is_the_script_s_output() -> None:
    # Generated, not hand-edited: re-rendering what it holds gives the file byte for byte, and it names its source.
    derived = json.loads(CHART_SCHEMA.read_text(encoding="utf-8"))
    assert _chart_schema_tool().render(derived["paths"], derived["meta"]) == CHART_SCHEMA.read_text(encoding="utf-8")
    assert "values.schema.json" in derived["meta"]["source"] and len(derived["paths"]) > 400
    assert not any("description" in entry or "title" in entry for entry in derived["paths"].values())


def test_the_values_file_passes_the_pinned_chart_schema() -> None:
    assert f"--version {PINNED_CHART}" in VALUES.read_text(encoding="utf-8")
    problems = _chart_schema_tool().check_values(_values(), _chart_paths())
    assert problems == [], f"deploy/helm/values.yaml against the chart {PINNED_CHART} schema: {problems}"


@pytest.mark.parametrize(
    ("where", "change", "expected"),
    [
        (("dagsterWebserver", "image"), {"pullPolicy": "Sometimes"},
         "dagsterWebserver.image.pullPolicy: 'Sometimes' is not one of Always, IfNotPresent, Never"),
        (("dagster-user-deployments", "deployments", 0), {"port": "3030"},
         "dagster-user-deployments.deployments[0].port: a string ('3030'), the chart takes integer"),
        (("telemetry",), {"enabled": "false"}, "telemetry.enabled: a string ('false'), the chart takes boolean"),
        (("dagsterDaemon", "runCoordinator", "config", "customRunCoordinator"), {"klass": "X"},
         "customRunCoordinator.klass: not a key the chart takes here (it takes: module, class, config)"),
        (("runLauncher", "config", "k8sRunLauncher"), {"envSecret": []},
         "runLauncher.config.k8sRunLauncher.envSecret: not a key the chart takes here"),
        (("dagsterWebserver",), {"replicas": 2}, "dagsterWebserver.replicas: not a key the chart takes here"),
        (("dagster-user-deployments", "deployments", 0), {"name": None},
         "dagster-user-deployments.deployments[0].name: a null (None), the chart takes string"),
        (("runLauncher",), {"type": "CustomRunLauncher"},
         "runLauncher.config: missing customRunLauncher, required with type: CustomRunLauncher"),
    ],
)
def test_the_chart_schema_check_refuses_what_the_chart_refuses(where: tuple, change: dict, expected: str) -> None:
    values = _values()
    target: Any = values
    for step in where:
        target = target[step]
    target.update(change)
    problems = _chart_schema_tool().check_values(values, _chart_paths())
    assert any(expected in problem for problem in problems), problems


def test_the_chart_schema_check_wants_required_keys_the_chart_defaults_may_lack() -> None:
    tool, paths = _chart_schema_tool(), _chart_paths()
    values = _values()
    del values["dagster-user-deployments"]["deployments"][0]["port"]  # a list item: the chart's defaults replaced
    del values["runLauncher"]["config"]["k8sRunLauncher"]["loadInclusterConfig"]  # nullable in the schema
    del values["dagsterDaemon"]["image"]["tag"]  # optional: fine
    problems = tool.check_values(values, paths)
    assert "dagster-user-deployments.deployments[0]: missing required port" in problems
    assert "runLauncher.config.k8sRunLauncher: missing required loadInclusterConfig" in problems
    assert len(problems) == 2, problems
    # An object on a chain of required keys is filled by the chart's own defaults (they pass its schema).
    assert paths["dagsterDaemon"]["guaranteed"] and "heartbeatTolerance" in paths["dagsterDaemon"]["required"]


def test_the_derivation_resolves_refs_alternatives_maps_and_conditions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "svc": {"$ref": "#/$defs/Svc"},
            "extra": {"anyOf": [{"$ref": "#/$defs/Svc"}, {"type": "null"}]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "pods": {"type": "array", "items": {"$ref": "#/$defs/Pod"}},
        },
        "required": ["svc", "pods"],
        "$defs": {
            "Mode": {"type": "string", "enum": ["a", "b"]},
            "Svc": {"type": "object", "additionalProperties": False, "required": ["mode", "port"],
                    "properties": {"mode": {"$ref": "#/$defs/Mode"}, "port": {"anyOf": [{"type": "integer"},
                                                                                        {"type": "string"}]},
                                   "a": {"type": "object"}},
                    "allOf": [{"if": {"properties": {"mode": {"const": "a"}}},
                               "then": {"properties": {"a": {"required": ["x"]}}}}]},
            "Pod": {"$ref": "https://example.invalid/_definitions.json#/definitions/io.k8s.api.core.v1.Pod",
                    "type": "object", "additionalProperties": True},
        },
    }
    tool = _chart_schema_tool()
    paths = tool.derive(schema)
    assert paths["svc"] == {"type": ["object"], "required": ["mode", "port"], "additional": False,
                            "guaranteed": True, "conditions": [{"when": {"mode": "a"}, "require": {"a": ["x"]}}]}
    assert paths["svc.mode"] == {"type": ["string"], "enum": ["a", "b"]}
    assert paths["svc.port"] == {"type": ["integer", "string"]}
    assert paths["extra"]["type"] == ["object", "null"] and paths["extra"]["guaranteed"] is False
    assert paths["labels.*"] == {"type": ["string"]}
    assert paths["pods[]"]["k8s"] == "io.k8s.api.core.v1.Pod" and paths["pods[]"]["guaranteed"] is False
    assert tool.check_values({"svc": {"mode": "a", "port": 1}, "pods": [{"any": 1}]}, paths) == [
        "svc.a: missing x, required with mode: a"]
    assert tool.check_values({"extra": {"mode": "c"}, "pods": []}, paths) == [
        "extra.mode: 'c' is not one of a, b", "extra: missing required port"]


def test_the_chart_schema_script_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "values.schema.json"
    broken.write_text('{"properties": ', encoding="utf-8")
    out = tmp_path / "derived.json"
    result = subprocess.run([sys.executable, str(DERIVE_SCRIPT), "derive", str(broken), "-o", str(out),
                             "--chart-version", "0", "--source", "test"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and not out.exists() and not list(tmp_path.glob(".derived*"))
    assert result.stderr.count("\n") == 1 and str(broken) in result.stderr and "does not parse" in result.stderr
    bad = tmp_path / "values.yaml"
    bad.write_text("telemetry: {enabled: 'no'}\n", encoding="utf-8")
    result = subprocess.run([sys.executable, str(DERIVE_SCRIPT), "check", str(bad), "--against", str(CHART_SCHEMA)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr == f"{bad}: telemetry.enabled: a string ('no'), the chart takes boolean\n"


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
