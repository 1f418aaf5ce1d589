"""The unpartitioned head of the lineage: ``frozen_split → job_plan``.

``frozen_split`` validates and fingerprints the split file; ``job_plan`` writes the deterministic
job list of every evaluation suite (``RunStorage.plan_path``: ``<runs_root>/_plans/<suite>.json``), which each suite's
``rollout_traces`` reads through its config and its ``plan_matches_job_plan`` check.

Built by a function, like every asset of the folder, so that the defs-folder scan finds no asset
object at module level: the location's assets come from ``location.py`` (or a scaffolded file) once.
"""

from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.documents import SuiteJobPlan

from .failures import as_failure
from .resources import EvaluationSuites, RunStorage

__all__ = ["JOB_PLAN_SCHEMA", "PLANS_GROUP", "FROZEN_SPLIT", "JOB_PLAN", "build_plan_assets"]

JOB_PLAN_SCHEMA = SuiteJobPlan.SCHEMA
PLANS_GROUP = "plans"
FROZEN_SPLIT = dg.AssetKey("frozen_split")
JOB_PLAN = dg.AssetKey("job_plan")


def build_plan_assets() -> list[dg.AssetsDefinition]:
    """``frozen_split`` and ``job_plan`` (unpartitioned; every suite's ``rollout_traces`` depends on ``job_plan``)."""

    @dg.asset(group_name=PLANS_GROUP, kinds={"json"})
    def frozen_split(evaluation_suites: EvaluationSuites) -> dg.MaterializeResult:
        """The frozen split file: validated (ids unique, declared hashes verified) and fingerprinted."""
        settings = evaluation_suites.settings()
        with as_failure():
            split_file = core.load_split_file(settings.split_file)
        rows = []
        metadata: dict[str, Any] = {}
        for name, split in sorted(split_file.splits.items()):
            rows.append(
                dg.TableRecord(
                    {
                        "split": name,
                        "role": split.role or "–",
                        "guarded": bool(split.guarded),
                        "persona": bool(split.persona),
                        "tasks": split.task_count,
                        "task_ids_sha256": split.task_ids_sha256,
                    }
                )
            )
            metadata[f"{name}_tasks"] = split.task_count
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("split", "string"),
                dg.TableColumn("role", "string"),
                dg.TableColumn("guarded", "bool"),
                dg.TableColumn("persona", "bool"),
                dg.TableColumn("tasks", "int"),
                dg.TableColumn("task_ids_sha256", "string"),
            ]
        )
        file_sha = core.sha256_file(split_file.path)
        metadata.update(
            {
                "path": dg.MetadataValue.path(str(split_file.path)),
                "file_sha256": file_sha,
                "split_version": str(split_file.version),
                "splits": dg.MetadataValue.table(rows, schema=schema),
            }
        )
        return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(file_sha[:16]))


    @dg.asset(group_name=PLANS_GROUP, deps=[FROZEN_SPLIT], kinds={"json"})
    def job_plan(evaluation_suites: EvaluationSuites, run_storage: RunStorage) -> dg.MaterializeResult:
        """The deterministic job list of every evaluation suite (task-major, seeded), one file per suite."""
        settings = evaluation_suites.settings()
        with as_failure():
            split_file = core.load_split_file(settings.split_file)
        rows = []
        metadata: dict[str, Any] = {}
        for name, suite in sorted(settings.suites.items()):
            with as_failure():
                split = split_file.get(suite.split)
            if suite.sample_size is not None and suite.sample_size > split.task_count:
                raise dg.Failure(
                    description=f"{settings.source}: suites.{name}.sample_size {suite.sample_size} exceeds the "
                    f"{split.task_count} tasks of split {suite.split!r}; lower it or set null",
                    allow_retries=False,
                )
            jobs = [
                job.to_dict()
                for job in core.plan_jobs(
                    split.task_ids,
                    split=suite.split,
                    experiment_seed=suite.seed,
                    sample_size=suite.sample_size,
                    repeats=suite.repeats,
                )
            ]
            jobs_fingerprint = core.fingerprint(jobs)
            plan_path = run_storage.plan_path(name)
            plan = SuiteJobPlan.parse(
                {
                    "schema_version": JOB_PLAN_SCHEMA,
                    "suite": name,
                    "split": split.identity(),
                    "guarded": split.guarded,
                    "seed": suite.seed,
                    "sample_size": suite.sample_size,
                    "repeats": suite.repeats,
                    "episodes": len(jobs),
                    "jobs_fingerprint": jobs_fingerprint,
                    "jobs": jobs,
                },
                str(plan_path),
            )
            core.write_json_atomic(plan_path, plan.to_json())
            rows.append(
                dg.TableRecord(
                    {
                        "suite": name,
                        "split": suite.split,
                        "guarded": bool(split.guarded),
                        "tasks": len({job["task_id"] for job in jobs}),
                        "repeats": suite.repeats,
                        "episodes": len(jobs),
                        "jobs_fingerprint": jobs_fingerprint[:16],
                    }
                )
            )
            metadata[f"{name}_episodes"] = len(jobs)
            metadata[f"{name}_jobs_fingerprint"] = jobs_fingerprint
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("suite", "string"),
                dg.TableColumn("split", "string"),
                dg.TableColumn("guarded", "bool"),
                dg.TableColumn("tasks", "int"),
                dg.TableColumn("repeats", "int"),
                dg.TableColumn("episodes", "int"),
                dg.TableColumn("jobs_fingerprint", "string"),
            ]
        )
        metadata["suites"] = dg.MetadataValue.table(rows, schema=schema)
        metadata["plans_dir"] = dg.MetadataValue.path(str(run_storage.plan_path("x").parent))
        return dg.MaterializeResult(metadata=metadata)

    return [frozen_split, job_plan]
