"""Everything the pipeline settings decide, as the defs folder's one ``@dg.definitions`` function.

``shopsimrl_dagster/definitions.py`` loads this folder with ``dg.load_from_defs_folder``, the way a
``dg`` project does: each module of ``defs/`` contributes its definitions. This module contributes
all of the pipeline's (plans and per-suite assets, the skills and research lineages, every job, both
sensors, the nightly schedule and the resources, for the settings file in use); the other modules
only hold builders and define nothing at module level. A file that ``dg scaffold defs dagster.asset
my_asset.py`` (or a person) adds to the folder contributes its own definitions beside these, and
its assets can use the location's resources.
"""

import json

import dagster as dg

from ..settings import PipelineSettings, load_pipeline_settings, pipeline_config_path
from .assets import build_suite_assets
from .jobs import evaluation_jobs
from .plans import build_plan_assets
from .research import AnalystEndpoint, build_research_assets, build_research_jobs
from .resources import resources_from_settings
from .schedules import build_nightly_schedule
from .sensors import build_progress_sensor, build_registry_sensor
from .skills import build_skill_assets, build_skills_job
from .training_round import build_round_sensor, build_training_round_assets, build_training_round_jobs

__all__ = ["pipeline_definitions", "build_definitions"]

_CACHE: dict[tuple[str, int], dg.Definitions] = {}


@dg.definitions
def pipeline_definitions() -> dg.Definitions:
    """The definitions of the pipeline settings file in use, built once per settings file version.

    The version is the file's path and modification time: Dagster reconstructs the repository
    several times per run, and an edited settings file still takes effect on reload.
    """
    path = pipeline_config_path()
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        key = (str(path), -1)  # load_pipeline_settings reports the missing file
    if key not in _CACHE:
        _CACHE[key] = build_definitions(load_pipeline_settings(path))
    return _CACHE[key]


def build_definitions(settings: PipelineSettings) -> dg.Definitions:
    """The pipeline's definitions for *settings* (tests, benchmarks): the same builders, no folder scan.

    Plans and per-suite assets, the skills and research lineages, every job, both sensors, the
    nightly schedule and the resources of *settings*; runs execute in process.
    """
    assets: list[dg.AssetsDefinition] = build_plan_assets()
    for name, suite in sorted(settings.suites.items()):
        assets.extend(build_suite_assets(name, suite))
    assets.extend(build_skill_assets(settings))
    assets.extend(build_research_assets(settings))  # docs/research.md
    research_jobs, round_jobs = build_research_jobs(), []
    round_sensors: list[dg.SensorDefinition] = []
    if settings.training is not None:  # a training round's trainer, triage and analysts (docs/research.md)
        assets.extend(build_training_round_assets(settings))
        round_jobs = build_training_round_jobs(settings)
        gate_job = [job for job in research_jobs if job.name == "training_round"]
        round_sensors = [build_round_sensor(settings, [*round_jobs, *gate_job])]
    analyst = AnalystEndpoint(section=json.dumps(settings.analyst.section()))
    return dg.Definitions(
        assets=assets,
        jobs=[*evaluation_jobs(settings).values(), build_skills_job(settings), *research_jobs, *round_jobs],
        sensors=[build_registry_sensor(settings), build_progress_sensor(settings), *round_sensors],
        schedules=[build_nightly_schedule(settings)],
        resources={**resources_from_settings(settings), "analyst": analyst},
        executor=dg.in_process_executor,
    )
