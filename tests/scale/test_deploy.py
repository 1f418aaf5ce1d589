"""The deployment pieces that need no server: instance file, executor choice, worker app settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shopsimrl_core import ConfigError
from shopsimrl_dagster.deploy.executors import ExecutionSettings, evaluation_executor
from shopsimrl_dagster.deploy.instance import (
    POSTGRES_ENV_VARS,
    main,
    missing_postgres_env,
    postgres_instance_yaml,
    prepare_postgres_home,
)
from shopsimrl_dagster.instance import INSTANCE_TEMPLATE
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_postgres_instance_is_the_template_plus_env_only_storage(tmp_path: Path) -> None:
    document = yaml.safe_load(postgres_instance_yaml())
    template = yaml.safe_load(INSTANCE_TEMPLATE.read_text(encoding="utf-8"))
    assert {k: v for k, v in document.items() if k != "storage"} == template
    db = document["storage"]["postgres"]["postgres_db"]
    # Every connection value is an env reference: nothing to leak from the file.
    assert {k: v for k, v in db.items() if k != "scheme"} == {
        "hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"}}
    home = prepare_postgres_home(tmp_path / "home")
    assert (home / "dagster.yaml").read_text(encoding="utf-8") == postgres_instance_yaml()


def test_preparing_without_the_connection_variables_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for name in POSTGRES_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAGSTER_PG_HOST", "db")
    assert missing_postgres_env() == ["DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"]
    assert main([str(tmp_path / "home")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DAGSTER_PG_PORT" in err and "docs/scaling.md" in err
    assert not (tmp_path / "home").exists()


def _settings(tmp_path: Path, execution: object) -> Path:
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base["execution"] = execution
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base), encoding="utf-8")
    return path


def test_the_executor_is_chosen_in_the_pipeline_settings(tmp_path: Path) -> None:
    assert load_pipeline_settings(_settings(tmp_path, {})).execution == ExecutionSettings()
    celery = load_pipeline_settings(_settings(tmp_path, {"executor": "celery"})).execution
    assert evaluation_executor(celery).name == "celery"
    assert evaluation_executor(ExecutionSettings()).name == "in_process"


def test_an_unknown_executor_is_a_one_line_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_pipeline_settings(_settings(tmp_path, {"executor": "dask"}))
    message = str(info.value)
    assert "execution.executor" in message and "pipeline.yaml" in message and "\n" not in message


def test_the_pipeline_passes_replicas_and_servers_to_the_core_config(tmp_path: Path) -> None:
    from shopsimrl_dagster.defs.resources import resources_from_settings
    from shopsimrl_dagster.eval_config import eval_config_document
    from shopsimrl_dagster.registry import Checkpoint

    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base["inference"]["base_urls"] = ["http://gpu-0:30000/v1", "http://gpu-1:30000/v1"]
    base["environment"]["base_urls"] = ["http://sim-0:5700", "http://sim-1:5700"]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base), encoding="utf-8")
    settings = load_pipeline_settings(path)
    resources = resources_from_settings(settings)

    def document(checkpoint: Checkpoint) -> dict:
        return eval_config_document(run_storage=resources["run_storage"], suite_name="val", suite=settings.suite("val"),
                                    checkpoint=checkpoint, inference=resources["inference_endpoint"],
                                    environment=resources["shopsim_environment"], split_file=settings.split_file)

    on_default = document(Checkpoint("ckpt-a", 100))
    assert on_default["model"]["base_urls"] == base["inference"]["base_urls"]
    assert on_default["environment"]["base_urls"] == base["environment"]["base_urls"]
    # A checkpoint served elsewhere does not inherit the default endpoint's replicas.
    elsewhere = document(Checkpoint("ckpt-b", 200, endpoint="http://gpu-9:30000/v1"))
    assert "base_urls" not in elsewhere["model"]
