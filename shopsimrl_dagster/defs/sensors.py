"""Sensors.

- ``checkpoint_registry_sensor``: new checkpoint files become partitions and get evaluated. Each
  tick reads the registry folder, adds the checkpoints that are not partitions yet, and requests one
  ``evaluate_<suite>`` run per (checkpoint, suite) of ``automation.new_checkpoint_suites``. The run
  key ``<checkpoint_id>:<suite>`` makes a request idempotent. A bad registry file is skipped and
  named (with the fix) in the tick's log, while the other files register. A request is never lost
  to a run that failed before any step started (a launch the code server did not answer, a run
  worker that died starting): once Dagster's run retries have given up on it, the sensor requests
  it again under ``<checkpoint_id>:<suite>:attempt-<n>``, up to ``MAX_REQUEST_ATTEMPTS`` requests,
  with a warning line in the tick's log (:func:`requests_to_renew`).
- ``progress_sensor``: each tick, for every ``evaluate_<suite>`` run that succeeded since the last
  one, charts those suites' progress (``<suite>/progress``, ``<suite>/best_checkpoint``) in one
  ``progress_charts`` run, so the chart follows every new evaluation, and catches up the comparison
  of the next checkpoint when it was evaluated first (a backfill runs checkpoints side by side: a
  later checkpoint whose baseline had no summary yet got no comparison).
"""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import dagster as dg

from ..registry import read_registry
from ..run_tags import TRIGGER_TAG
from ..settings import PipelineSettings
from .assets import suite_asset_key
from .jobs import evaluation_job_name, evaluation_jobs
from .partitions import CHECKPOINTS, checkpoints
from .resources import CheckpointRegistry

__all__ = [
    "MAX_REQUEST_ATTEMPTS",
    "REGISTRY_TRIGGER",
    "Renewal",
    "run_key",
    "requests_to_renew",
    "build_registry_sensor",
    "build_progress_sensor",
    "comparisons_to_catch_up",
]

MAX_REQUEST_ATTEMPTS = 3
"""Requests the registry sensor makes at most for one (checkpoint, suite): the first and two renewals."""
REGISTRY_TRIGGER = "registry-sensor"
"""The ``shopsimrl/trigger`` value of the registry sensor's runs (Dagster's retries of them inherit it)."""
_RUN_KEY_TAG, _PARTITION_TAG = "dagster/run_key", "dagster/partition"
_RECENT_FAILURES = 200  # failed runs of the sensor looked at per tick, newest first


def run_key(checkpoint_id: str, suite: str, attempt: int = 1) -> str:
    """The idempotency key of one evaluation request (``:attempt-<n>`` from the second request on)."""
    key = f"{checkpoint_id}:{suite}"
    return key if attempt <= 1 else f"{key}:attempt-{attempt}"


def _attempt_of(key: str | None) -> int:
    tail = key.rsplit(":attempt-", 1)[1] if key and ":attempt-" in key else ""
    return int(tail) if tail.isdigit() else 1


@dataclass(frozen=True)
class Renewal:
    """One request of the registry sensor to make again: its run failed before any step started."""

    checkpoint_id: str
    suite: str
    attempt: int
    failed_run_id: str


def requests_to_renew(
    instance: dg.DagsterInstance,
    checkpoint_ids: Collection[str],
    suite_by_job: Mapping[str, str],
    max_attempts: int = MAX_REQUEST_ATTEMPTS,
) -> tuple[list[Renewal], list[str]]:
    """The sensor's requests whose evaluation is lost, to request again; and those given up on (one line each).

    A (checkpoint, suite) is renewed when the newest run of its ``evaluate_<suite>`` partition (any
    trigger: a backfill or a human re-execution that started after it counts) was requested by this
    sensor, **failed before any of its steps started**, and Dagster will not retry it (run retries
    off, exhausted, or their own launch failed); then with the next attempt number, until
    *max_attempts* requests were made. A run that failed in a step (a real failure, retried by the
    step's policy), a canceled run (a human's decision) and checkpoints no longer in the registry
    are left alone.
    """
    failed = instance.get_runs(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], tags={TRIGGER_TAG: REGISTRY_TRIGGER}),
        limit=_RECENT_FAILURES,
    )
    renewals: list[Renewal] = []
    given_up: list[str] = []
    seen: set[tuple[str, str]] = set()
    for run in failed:
        checkpoint_id, suite = run.tags.get(_PARTITION_TAG, ""), suite_by_job.get(run.job_name)
        if suite is None or checkpoint_id not in checkpoint_ids or (checkpoint_id, suite) in seen:
            continue
        seen.add((checkpoint_id, suite))
        # Newest first: the partition's runs of this job, whoever launched them.
        chain = instance.get_runs(filters=dg.RunsFilter(job_name=run.job_name, tags={_PARTITION_TAG: checkpoint_id}))
        latest = chain[0]
        if (
            latest.status != dg.DagsterRunStatus.FAILURE
            or latest.tags.get(TRIGGER_TAG) != REGISTRY_TRIGGER
            or latest.is_complete_and_waiting_to_retry
            or instance.all_logs(latest.run_id, of_type=dg.DagsterEventType.STEP_START)
        ):
            continue
        ours = [r for r in chain if r.tags.get(TRIGGER_TAG) == REGISTRY_TRIGGER]
        attempts = max(_attempt_of(r.tags.get(_RUN_KEY_TAG)) for r in ours)
        if attempts >= max_attempts:
            given_up.append(
                f"{checkpoint_id} on {suite}: run {latest.run_id} failed before any step started; "
                f"not requested again after {attempts} requests (launch it from the UI once the cause is fixed)"
            )
            continue
        renewals.append(Renewal(checkpoint_id, suite, attempts + 1, latest.run_id))
    return renewals, given_up


def build_registry_sensor(settings: PipelineSettings) -> dg.SensorDefinition:
    """The sensor for *settings* (suites and interval come from its ``automation`` block)."""
    suites = list(settings.automation.new_checkpoint_suites)
    jobs = evaluation_jobs(settings)
    suite_by_job = {evaluation_job_name(suite): suite for suite in suites}

    @dg.sensor(
        name="checkpoint_registry_sensor",
        jobs=[jobs[evaluation_job_name(suite)] for suite in suites],
        minimum_interval_seconds=settings.automation.sensor_interval_s,
        description=f"Registers new checkpoints from the registry folder and evaluates them on: {', '.join(suites)}.",
        default_status=(
            dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running else dg.DefaultSensorStatus.STOPPED
        ),
    )
    def checkpoint_registry_sensor(
        context: dg.SensorEvaluationContext, checkpoint_registry: CheckpointRegistry
    ) -> dg.SensorResult | dg.SkipReason:
        problems: list[str] = []
        entries = checkpoint_registry.checkpoints(problems=problems)
        for line in problems:
            context.log.warning(line)
        known = set(context.instance.get_dynamic_partitions(CHECKPOINTS))
        new = [entry for entry in entries if entry.checkpoint_id not in known]
        steps = {entry.checkpoint_id: entry.step for entry in entries}
        renewals, given_up = requests_to_renew(context.instance, known & set(steps), suite_by_job)
        for renewal in renewals:
            context.log.warning(
                f"{renewal.checkpoint_id} on {renewal.suite}: run {renewal.failed_run_id} failed before any step "
                f"started; requesting it again (request {renewal.attempt} of {MAX_REQUEST_ATTEMPTS})"
            )
        if not new and not renewals:
            skipped = f"; {len(problems)} bad file(s) skipped: {' | '.join(problems)}" if problems else ""
            lost = f"; given up: {' | '.join(given_up)}" if given_up else ""
            return dg.SkipReason(
                f"no new checkpoints in {checkpoint_registry.folder} ({len(entries)} registered){skipped}{lost}"
            )

        def request(checkpoint_id: str, suite: str, attempt: int = 1) -> dg.RunRequest:
            return dg.RunRequest(
                run_key=run_key(checkpoint_id, suite, attempt),
                job_name=evaluation_job_name(suite),
                partition_key=checkpoint_id,
                tags={TRIGGER_TAG: REGISTRY_TRIGGER, "shopsimrl/checkpoint-step": str(steps[checkpoint_id])},
            )

        requests = [request(entry.checkpoint_id, suite) for entry in new for suite in suites]
        requests += [request(r.checkpoint_id, r.suite, r.attempt) for r in renewals]
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=(
                [checkpoints.build_add_request([entry.checkpoint_id for entry in new])] if new else []
            ),
        )

    return checkpoint_registry_sensor


def comparisons_to_catch_up(settings: PipelineSettings, suite: str, checkpoint_id: str) -> list[str]:
    """Checkpoints whose comparison with *checkpoint_id* (their previous one) is due now that it has a summary.

    With ``comparison.baseline: previous``: the next registered checkpoint by training step, when it has a
    summary of *suite* but no ``comparison_vs_<checkpoint_id>.json`` (it finished first). Empty otherwise.
    """
    if settings.comparison.baseline != "previous":
        return []
    entries = read_registry(settings.checkpoint_registry)
    ids = [entry.checkpoint_id for entry in entries]
    if checkpoint_id not in ids or ids.index(checkpoint_id) + 1 >= len(ids):
        return []
    after = ids[ids.index(checkpoint_id) + 1]
    run_dir = settings.runs_root / suite / after
    if (run_dir / "summary.json").exists() and not (run_dir / f"comparison_vs_{checkpoint_id}.json").exists():
        return [after]
    return []


_PROGRESS_TRIGGER = "progress-sensor"
_PROGRESS_FETCH = 1000  # successful runs looked at per tick; more wait for the next tick (the cursor moves on)
_NOT_YET_RUNNING = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING]


def _success_cursor(instance: dg.DagsterInstance, cursor: str | None) -> int | None:
    """The storage id after which to look for ``RUN_SUCCESS`` events; None when the sensor has no cursor yet.

    Takes this sensor's own cursor (a storage id) and the one Dagster's ``run_status_sensor`` kept
    under the same name before (a serialized ``RunStatusSensorCursor`` with ``record_id``), so an
    instance that ran the old sensor carries on where it stopped.
    """
    if cursor is None:
        return None
    if cursor.lstrip("-").isdigit():
        return int(cursor)
    try:
        record_id = json.loads(cursor).get("record_id")
    except (ValueError, AttributeError):
        return None
    return record_id if isinstance(record_id, int) else None


def build_progress_sensor(settings: PipelineSettings) -> dg.SensorDefinition:
    """Chart every suite with a newly successful ``evaluate_<suite>`` run, and request late comparisons.

    One tick handles **every** evaluation run that succeeded since the last tick (Dagster's
    ``run_status_sensor`` handles one per tick once its function returns requests, so after a backfill
    the chart trailed by a tick per checkpoint, behind a chart run per evaluation). It requests one
    ``progress_charts`` run for all the suites those runs evaluated — none for a suite whose chart run
    from an earlier tick has not started yet (it will read the new summaries when it does) — and the
    comparison of each later checkpoint that finished before its baseline (:func:`comparisons_to_catch_up`).
    """
    jobs = evaluation_jobs(settings)
    by_job = {evaluation_job_name(suite): suite for suite in settings.suites}

    @dg.sensor(
        name="progress_sensor",
        jobs=[jobs["progress_charts"], *(jobs[name] for name in sorted(by_job))],
        description="Redraws <suite>/progress and <suite>/best_checkpoint once per tick for every suite with a "
        "successful evaluate_<suite> run since the last tick, and computes the comparison of a later checkpoint "
        "that finished before its baseline.",
        default_status=(
            dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running else dg.DefaultSensorStatus.STOPPED
        ),
    )
    def progress_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        instance = context.instance
        after = _success_cursor(instance, context.cursor)
        if after is None:  # first tick: start from now, as Dagster's run status sensors do
            latest = instance.fetch_run_status_changes(dg.DagsterEventType.RUN_SUCCESS, limit=1).records
            start = latest[0].storage_id if latest else -1
            context.update_cursor(str(start))
            return dg.SkipReason(f"progress_sensor starts after event {start}")
        records = instance.fetch_run_status_changes(
            dg.RunStatusChangeRecordsFilter(event_type=dg.DagsterEventType.RUN_SUCCESS, after_storage_id=after),
            limit=_PROGRESS_FETCH,
            ascending=True,
        ).records
        if not records:
            return dg.SkipReason("no evaluation succeeded since the last tick")
        cursor = str(records[-1].storage_id)
        run_ids = list(dict.fromkeys(r.event_log_entry.run_id for r in records))
        runs = {r.run_id: r for r in instance.get_runs(filters=dg.RunsFilter(run_ids=run_ids))}
        evaluated: list[tuple[str, str]] = []  # (suite, checkpoint) in the order the runs succeeded
        for run_id in run_ids:
            run = runs.get(run_id)
            suite = by_job.get(run.job_name) if run is not None else None
            if run is None or suite is None or not _this_location(context, run):
                continue
            evaluated.append((suite, run.tags.get(_PARTITION_TAG, "")))
        if not evaluated:
            return dg.SensorResult(skip_reason=f"no evaluation among {len(run_ids)} successful run(s)", cursor=cursor)
        suites = [suite for suite in settings.suites if any(s == suite for s, _ in evaluated)]
        pending = instance.get_runs(
            filters=dg.RunsFilter(
                job_name="progress_charts", statuses=_NOT_YET_RUNNING, tags={TRIGGER_TAG: _PROGRESS_TRIGGER}
            )
        )
        waiting = {key for run in pending for key in (run.asset_selection or ())}
        charted = [
            suite
            for suite in suites
            if not {suite_asset_key(suite, "progress"), suite_asset_key(suite, "best_checkpoint")} <= waiting
        ]
        requests: list[dg.RunRequest] = []
        if charted:
            requests.append(
                dg.RunRequest(
                    run_key=f"progress:{cursor}",
                    job_name="progress_charts",
                    asset_selection=[
                        key
                        for suite in charted
                        for key in (suite_asset_key(suite, "progress"), suite_asset_key(suite, "best_checkpoint"))
                    ],
                    tags={TRIGGER_TAG: _PROGRESS_TRIGGER},
                )
            )
        seen: set[str] = set()
        for suite, checkpoint_id in evaluated:
            for later in comparisons_to_catch_up(settings, suite, checkpoint_id):
                key = f"comparison:{suite}:{later}:{checkpoint_id}"
                if key in seen:
                    continue
                seen.add(key)
                requests.append(
                    dg.RunRequest(
                        run_key=key,
                        job_name=evaluation_job_name(suite),
                        partition_key=later,
                        asset_selection=[suite_asset_key(suite, "checkpoint_comparison")],
                        tags={TRIGGER_TAG: _PROGRESS_TRIGGER},
                    )
                )
        done = ", ".join(f"{checkpoint_id} on {suite}" for suite, checkpoint_id in evaluated)
        context.log.info(
            f"{len(evaluated)} evaluation(s) succeeded since the last tick ({done}); "
            f"charting {', '.join(charted) or 'nothing new (a chart run is still waiting to start)'}"
        )
        if not requests:
            return dg.SensorResult(skip_reason="a chart run for these suites is still waiting to start", cursor=cursor)
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return progress_sensor


def _this_location(context: dg.SensorEvaluationContext, run: dg.DagsterRun) -> bool:
    """Whether *run* belongs to this sensor's repository (runs launched in-process have no origin: they do)."""
    origin = run.remote_job_origin
    name = context.repository_name
    return origin is None or name is None or origin.repository_origin.repository_name == name
