"""The code location: every definition of ``shopsimrl_dagster/defs/``, built in one place.

``workspace.yaml`` at the repository root (and ``dg dev`` / ``dg check defs`` through
``[tool.dg]`` in pyproject.toml) points at ``defs``. It calls the builders of the ``defs/`` modules
directly with the pipeline settings in use, rather than ``dg.load_from_defs_folder``: the folder
scan and its component-library lookup cost ~2–6 s of every run worker's start-up, which was most
of the overhead of a resumed evaluation. ``build_definitions`` builds the same for an explicit
settings object (tests, benchmarks).
"""

from __future__ import annotations

import json

import dagster as dg

from .settings import PipelineSettings

__all__ = ["defs", "build_definitions"]


_CACHE: dict[tuple[str, int], dg.Definitions] = {}


@dg.definitions
def defs() -> dg.Definitions:
    """All assets, checks, jobs, sensors, schedules and resources, for the pipeline settings file in use.

    Built once per settings file version (path and modification time): Dagster reconstructs the
    repository several times per run, and an edited settings file still takes effect on reload.
    """
    from .settings import load_pipeline_settings, pipeline_config_path

    path = pipeline_config_path()
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        key = (str(path), -1)  # load_pipeline_settings reports the missing file
    if key not in _CACHE:
        _CACHE[key] = build_definitions(load_pipeline_settings(path))
    return _CACHE[key]


def build_definitions(settings: PipelineSettings) -> dg.Definitions:
    """The location's definitions for *settings* instead of the settings file in use.

    Same builders as the defs folder: plans and per-suite assets, the skills lineage, every job,
    both sensors, the nightly schedule and the resources of *settings*.
    """
    from .defs.assets import build_suite_assets
    from .defs.jobs import evaluation_jobs
    from .defs.plans import frozen_split, job_plan
    from .defs.research import AnalystEndpoint, build_research_assets, build_research_jobs
    from .defs.resources import resources_from_settings
    from .defs.schedules import build_nightly_schedule
    from .defs.sensors import build_progress_sensor, build_registry_sensor
    from .defs.skills import build_skill_assets, build_skills_job

    assets: list[dg.AssetsDefinition] = [frozen_split, job_plan]
    for name, suite in sorted(settings.suites.items()):
        assets.extend(build_suite_assets(name, suite))
    assets.extend(build_skill_assets(settings))
    assets.extend(build_research_assets(settings))  # docs/research.md
    analyst = AnalystEndpoint(section=json.dumps(settings.analyst.section()))
    return dg.Definitions(
        assets=assets,
        jobs=[*evaluation_jobs(settings).values(), build_skills_job(settings), *build_research_jobs()],
        sensors=[build_registry_sensor(settings), build_progress_sensor(settings)],
        schedules=[build_nightly_schedule(settings)],
        resources={**resources_from_settings(settings), "analyst": analyst},
        executor=dg.in_process_executor,
    )
