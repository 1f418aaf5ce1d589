"""A training round in Dagster: round_inputs (preflight) → the trainer through Dagster Pipes → triage → analysts.

The trainer is ``tests/testkit/scripted_trainer.py``: a real external process that plays GRPO groups with
``TrainingSession`` against the sandbox environment and a sandbox policy on its own checkpoints, reports
through ``shopsimrl_pipes`` and registers two checkpoints of rising competence.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from testkit.researchkit import AnalystServer
from testkit.roundkit import add_training_section

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.registry import read_registry
from shopsimrl_dagster.settings import load_pipeline_settings

pytestmark = pytest.mark.slow
ROUND = "round-001"
KEYS = ("round_inputs", "round_training", "round_triage", "round_online_analysis")


def _settings(tmp_path: Path, sandbox: Any, settings_writer: Any, analyst_url: str | None = None, **training: Any):
    path = settings_writer(tmp_path, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                           served_model=sandbox.served_model, split_file=sandbox.split_file, val_sample=4)
    add_training_section(path, sandbox, analyst_url=analyst_url, **training)
    return load_pipeline_settings(path)


def _materialize(settings: Any, instance: dg.DagsterInstance, keys: tuple[str, ...] = KEYS) -> Any:
    location = build_definitions(settings)
    graph = location.resolve_asset_graph()
    assets = [a for a in location.assets if isinstance(a, dg.AssetsDefinition)
              and any(k.to_user_string() in keys for k in a.keys)]
    assert {k.to_user_string() for a in assets for k in a.keys} == set(keys), graph
    return dg.materialize(assets, partition_key=ROUND, instance=instance, resources=location.resources,
                          raise_on_error=False)


def _meta(result: Any) -> dict[str, Any]:
    return {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


def test_a_round_runs_the_trainer_through_pipes_and_the_analysts_read_its_pending_failures(
        tmp_path: Path, sandbox: Any, settings_writer: Any, analyst: AnalystServer) -> None:
    from shopsimrl_core.skills.trace2skill._online import pending_analysis_episodes

    settings = _settings(tmp_path, sandbox, settings_writer, analyst_url=analyst.url, train_tasks=6)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_rounds", [ROUND])
        first = _materialize(settings, instance, KEYS[:1])
        # the round sensor starts the trainer for inputs whose preflight passed ...
        assert _sensor_jobs(settings, instance) == ["round_trainer"]
        result = _materialize(settings, instance, KEYS[1:])
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        # ... and not again once the round trained after them (no gate configured here: nothing else to start)
        assert _sensor_jobs(settings, instance) == []
        meta = {**_meta(first), **_meta(result)}
        [check] = first.get_asset_check_evaluations()
        assert check.check_name == "training_preflight" and check.passed
        assert meta["round_inputs"]["preflight_ok"] is True and meta["round_inputs"]["tasks"] == 6
        training = meta["round_training"]
        # the trainer's own reports, through Pipes: two steps, two checkpoints, metrics of real groups
        assert training["steps_reported"] == 2 and training["steps"] == 2
        assert training["checkpoints"] == [f"{ROUND}-step-000001", f"{ROUND}-step-000002"]
        steps = training["progress"]["steps"]
        assert all(0.0 <= s["reward"] <= 1.0 and 0.0 <= s["frontier_share"] <= 1.0 and s["tokens_per_s"] > 0
                   for s in steps)
        observations = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        assert len(observations) == 2
        # registered: whole entries naming the weights and the step, competence rising (lapse rates falling)
        entries = {c.checkpoint_id: c for c in read_registry(settings.checkpoint_registry)}
        assert sorted(entries) == training["checkpoints"]
        lapses = [json.loads(Path(entries[i].weights).read_text())["lapses"] for i in training["checkpoints"]]
        assert [entries[i].step for i in training["checkpoints"]] == [1, 2]
        assert all(lapses[1][k] < lapses[0][k] for k in lapses[0] if lapses[0][k] > 0)
        # triage: the classification counts of the round's documents, pending episodes linked to the viewer
        triage = meta["round_triage"]
        out_dir = settings.runs_root / "rounds" / ROUND / "training"
        documents = list((out_dir / "triage").glob("*.json"))
        assert triage["groups"] == len(documents) == 12  # 6 tasks x 2 steps
        assert sum(triage["classifications"].values()) == 12
        pending = pending_analysis_episodes(out_dir)
        assert triage["pending_analysis"] == len(pending) > 0
        for episode in pending:
            assert f"/run/rounds/{ROUND}/training/episode/{episode}" in triage["pending_analysis_episodes"]
        # the analysts read exactly the pending-analysis episodes
        online = meta["round_online_analysis"]
        document = json.loads((settings.runs_root / "rounds" / ROUND / "online_analysis" /
                               "online_failure_analysis.json").read_text())
        assert document["input_episode_ids"] == pending and online["input_episodes"] == len(pending)
        assert online["proposal_checkpoint"] == f"{ROUND}-step-000002"
        # the viewer's round page: every group with its samples' rewards, the retry and the classification
        _round_page_shows_the_groups(settings.runs_root, out_dir, triage["round_in_viewer"])


def _round_page_shows_the_groups(runs_root: Path, out_dir: Path, url_in_dagster: str) -> None:
    import re
    import socket

    import httpx
    import uvicorn

    from shopsimrl_core.documents._training import GroupTriage
    from shopsimrl_core.viewer import create_app

    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app([str(runs_root)]), log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.05)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        path = f"/round/rounds/{ROUND}/training"
        assert url_in_dagster.endswith(path)  # round_triage links here
        page = httpx.get(base + path, timeout=30, trust_env=False)
        assert page.status_code == 200, page.text[:300]
        documents = [GroupTriage.parse(json.loads(p.read_text()), str(p))
                     for p in sorted((out_dir / "triage").glob("*.json"))]
        rows = re.findall(r'<tr class="group" data-group="([^"]+)">(.*?)</tr>', page.text, re.S)
        assert [key for key, _ in rows] == [d.group_key for d in documents]
        for (_, row), document in zip(rows, documents, strict=True):
            assert f">{document.classification}</span>" in row
            for member in document.members:  # each sample's reward, linked to its episode page
                assert f"/episode/{member.episode_id}\">#{member.sample_in_group}</a> {member.reward:.3f}" in row
            if document.diagnostic_retry is not None:
                assert f"/episode/{document.diagnostic_retry.episode_id}\">retry</a>" in row
        links = re.findall(r'href="(/run/[^"]+/episode/[^"]+)"', page.text)
        assert links and httpx.get(base + links[0], timeout=30, trust_env=False).status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _sensor_jobs(settings: Any, instance: dg.DagsterInstance) -> list[str]:
    sensor = build_definitions(settings).get_sensor_def("round_sensor")
    result = sensor(dg.build_sensor_context(instance=instance))
    return [] if isinstance(result, dg.SkipReason) else [r.job_name for r in result.run_requests]


def test_a_failed_preflight_never_starts_the_trainer(tmp_path: Path, sandbox: Any, settings_writer: Any) -> None:
    # the training YAML's sampling truncates the distribution: exact tokens refuse it in the preflight
    settings = _settings(tmp_path, sandbox, settings_writer, sampling={"top_p": 0.9})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_rounds", [ROUND])
        result = _materialize(settings, instance, KEYS[:2])
        [check] = result.get_asset_check_evaluations()
        assert not check.passed
        assert _sensor_jobs(settings, instance) == []  # the round sensor does not start it either
        assert not (settings.runs_root / "rounds" / ROUND / "checkpoints").exists()
        assert not (settings.runs_root / "rounds" / ROUND / "trainer_status.json").exists()
        assert read_registry(settings.checkpoint_registry) == []
        # and round_training on its own refuses too, naming the preflight
        again = _materialize(settings, instance, KEYS[1:2])
        assert not again.success
        failure = next(e for e in again.all_events if e.is_step_failure)
        assert "the training preflight failed, so the trainer was not started" in str(failure.event_specific_data)
        assert not (settings.runs_root / "rounds" / ROUND / "trainer_status.json").exists()


def _trainer_pid(settings: Any, timeout_s: float = 300) -> int:
    """The pid of the scripted trainer once it registered its first checkpoint (found by its command line)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if read_registry(settings.checkpoint_registry, problems=[]):
            for proc in Path("/proc").iterdir():
                try:
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
                except OSError:
                    continue
                # the trainer itself (argv[1] is the script), not its supervisor (python -m shopsimrl_pipes.group)
                if len(cmdline) > 1 and cmdline[1].endswith(b"scripted_trainer.py") and b"--hang-after-step" in cmdline:
                    return int(proc.name)
        time.sleep(0.5)
    raise AssertionError("the trainer did not register its first checkpoint")


def test_sigkill_of_the_trainer_fails_the_run_naming_it_and_registers_nothing_half(
        tmp_path: Path, sandbox: Any, settings_writer: Any) -> None:
    settings = _settings(tmp_path, sandbox, settings_writer, trainer_args=("--hang-after-step", "1"))
    killed: list[int] = []

    def kill() -> None:
        pid = _trainer_pid(settings)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_rounds", [ROUND])
        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        result = _materialize(settings, instance, KEYS[:2])
        killer.join(timeout=60)
        assert killed and not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        text = str(failure.event_specific_data)
        assert "[trainer-failed]" in text and "scripted_trainer.py" in text
        assert f"(pid {killed[0]}) was killed by SIGKILL" in text
        assert f"checkpoints registered by this round: {ROUND}-step-000001 " in text
        # the one checkpoint it registered is whole; nothing else is in the registry, not even a temp file
        problems: list[str] = []
        assert [c.checkpoint_id for c in read_registry(settings.checkpoint_registry, problems=problems)] == [
            f"{ROUND}-step-000001"] and problems == []
        assert sorted(p.name for p in settings.checkpoint_registry.iterdir()) == [f"{ROUND}-step-000001.json"]
        # materialized again, the round resumes from that checkpoint (the command takes {resume_from})
        again = _materialize(settings, instance, KEYS[1:2])
        assert again.success
        meta = _meta(again)["round_training"]
        first = read_registry(settings.checkpoint_registry)[0]
        assert meta["resumed_from"] == first.weights
        assert meta["checkpoints"] == [f"{ROUND}-step-000002", f"{ROUND}-step-000003"]
        messages = [record.user_message for record in instance.all_logs(again.run_id)]
        assert any(m.startswith(f"resuming the round from {ROUND}-step-000001") for m in messages)


def test_a_trainer_command_without_resume_from_says_the_round_starts_again(
        tmp_path: Path, sandbox: Any, settings_writer: Any) -> None:
    settings = _settings(tmp_path, sandbox, settings_writer, steps=1)
    training = settings.training.model_copy(update={"command": [a for a in settings.training.command
                                                                if a not in ("--resume_from", "{resume_from}")]})
    settings = settings.model_copy(update={"training": training})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_rounds", [ROUND])
        assert _materialize(settings, instance, KEYS[:2]).success
        again = _materialize(settings, instance, KEYS[1:2])  # the round already registered step 1
        assert again.success
        messages = [record.user_message for record in instance.all_logs(again.run_id)]
        assert any("takes no {resume_from}, so it starts the round again from its beginning" in m for m in messages)
        assert _meta(again)["round_training"]["resumed_from"] == "none"


def test_a_later_round_never_falls_back_to_the_first_rounds_curriculum(
        tmp_path: Path, sandbox: Any, settings_writer: Any) -> None:
    settings = _settings(tmp_path, sandbox, settings_writer)
    location = build_definitions(settings)
    [inputs] = [a for a in location.assets if isinstance(a, dg.AssetsDefinition)
                and dg.AssetKey("round_inputs") in a.keys]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_rounds", [ROUND, "round-002"])
        result = dg.materialize([inputs], partition_key="round-002", instance=instance,
                                resources=location.resources, raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert (f"round round-002: no curriculum — the previous round {ROUND!r} has no round_curriculum"
                in str(failure.event_specific_data))
        assert not (settings.runs_root / "rounds" / "round-002").exists()  # nothing written
        # the first round takes training.initial_curriculum
        assert dg.materialize([inputs], partition_key=ROUND, instance=instance, resources=location.resources).success
