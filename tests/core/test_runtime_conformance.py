"""Runtime spec Appendix A and §22: the checklist rows that no other test file proves on its own.

Each test is named after its checklist row (or §22 item) and cites the spec section. Rows fully
proved elsewhere are mapped in the audit report, not repeated here. Everything is in-process
except the seed probe, which is also run against the real sandbox policy server over loopback.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from testkit.core_runkit import FakeEpisodes, record, small_splits, write_config
from testkit.gatekit import make_bare_run  # noqa: E402
from testkit.gatekit import write_config as write_gate_config  # noqa: E402
from testkit.gatekit import write_split as write_gate_split  # noqa: E402
from testkit.tracegen import make_trace, write_traces  # noqa: E402

from shopsimrl_core import build_plan, load_config, run_evaluation, summarize_run
from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint
from shopsimrl_core.cli._main import main as cli_main
from shopsimrl_core.runs.planning._jobs import EpisodeJob, call_seed, episode_id, episode_seed, sample_task_ids

# --------------------------------------------------------------------------- Hashing (§2)


def test_hashing_fingerprint_vectors() -> None:
    """§2.2: a string is hashed as its JSON encoding (quotes, escapes, literal CJK), not its raw bytes.

    The legacy default-prompt vector (003c6632…be6d) needs the legacy prompt file, which the project
    does not ship; the hashing of a loaded prompt file is proved in test_prompts.py.
    """
    assert fingerprint("abc") == "6cc43f858fbb763301637b5af970e2a46b46f461f27e5a0f41e009c59b827b25"
    assert fingerprint("abc") != hashlib.sha256(b"abc").hexdigest()
    assert fingerprint("规格\n核验") == "ebbf7fd6ec7513d73ea1d4edb827aa009f60d1d7bdb84013e3f530adc54b6d71"


# --------------------------------------------------------------------------- Jobs (§4)


def test_jobs_sampling_vector_seed_table_and_episode_id() -> None:
    """§4.2 sampling vector, §4.3 seed table (all five rows, per-call seed), §4.4 episode_id format."""
    assert sample_task_ids([1, 5, 8, 16, 42, 57, 63, 71, 88, 90], 4, 20260828) == [57, 90, 16, 8]
    table = [(19, 0, 2694671387, "task-000019__sample-000"), (19, 1, 831922249, "task-000019__sample-001"),
             (1, 0, 789136293, "task-000001__sample-000"), (5, 0, 2967413446, "task-000005__sample-000"),
             (8, 0, 56394558, "task-000008__sample-000")]
    for task_id, sample_id, seed, eid in table:
        assert episode_seed(20260830, task_id, sample_id) == seed
        assert episode_id(task_id, sample_id) == EpisodeJob(task_id, sample_id, seed, "test").episode_id == eid
    assert call_seed(2694671387, 3) == 2694671389
    assert call_seed(2**32 - 1, 2) == 2**32  # not reduced mod 2**32
    assert episode_id(1234567, 1000) == "task-1234567__sample-1000"  # wider numbers are not truncated


# --------------------------------------------------------------------------- Paired validation (§14)


def _bare(tmp_path: Path) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    split = write_gate_split(tmp_path / "splits.json", val=[19, 20, 30, 31])
    run = make_bare_run(write_gate_config(tmp_path / "bare.yaml", split))
    plan = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["plan"]
    traces = [json.loads(line) for line in (run / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    return run, plan, traces


def _preflight(run: Path, plan: dict[str, Any], traces: list[dict[str, Any]]) -> Any:
    from shopsimrl_core.skills._gate import preflight_bare_run

    write_traces(run / "traces.jsonl", traces)
    return preflight_bare_run(run, plan, send_seed=True)


def _edit(traces: list[dict[str, Any]], index: int, change) -> list[dict[str, Any]]:
    out = copy.deepcopy(traces)
    change(out[index])
    return out


def _set(path: str, value: Any):
    def change(rec: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target = rec
        for key in parents:
            target = target[key]
        if value is _DROP:
            target.pop(leaf)
        else:
            target[leaf] = value
    return change


_DROP = object()


def _rejections(traces: list[dict[str, Any]]) -> dict[str, tuple[list[dict[str, Any]], str]]:
    failed = make_trace(19, split="val", status="failed")
    extra = copy.deepcopy(traces[0])
    extra["job"] = dict(extra["job"], task_id=99, seed=episode_seed(20260830, 99, 0))
    extra["episode_id"] = episode_id(99, 0)

    def only_failed(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [failed] + recs[1:]

    return {
        "missing": (traces[1:], "do not cover the planned jobs"),
        "extra": (traces + [extra], "do not cover the planned jobs"),
        "failed": (only_failed(traces), "do not cover the planned jobs"),
        "duplicate-completed": (traces + [traces[0]], "duplicate completed validation trace"),
        "task": (_edit(traces, 0, _set("job.task_id", 98)), "do not cover the planned jobs"),
        "split": (_edit(traces, 0, _set("job.split", "train")), "do not cover the planned jobs"),
        "seed": (_edit(traces, 0, _set("job.seed", 7)), "do not cover the planned jobs"),
        "skills-in-bare": (_edit(traces, 0, _set("selected_skills", [{"skill_id": "chunk-x"}])), "carries skills"),
        "missing-provenance": (_edit(traces, 0, _set("provenance.runtime", _DROP)), "lacks provenance.runtime"),
        "checkpoint": (_edit(traces, 0, _set("provenance.model.checkpoint_id", "other")), "model provenance differs"),
        "sampling": (
            _edit(traces, 0, lambda r: r["provenance"]["model"]["sampling"].update(temperature=0.7)),
            "model provenance differs",
        ),
        "prompt": (
            _edit(traces, 0, _set("provenance.prompt.system_prompt_sha256", "0" * 64)),
            "prompt/runtime provenance",
        ),
        "runtime": (_edit(traces, 0, _set("provenance.runtime.max_steps", 5)), "prompt/runtime provenance"),
        "environment": (
            _edit(traces, 0, _set("provenance.environment.base_url", "http://elsewhere")),
            "environment provenance differs",
        ),
        "environment-versions": (
            _edit(traces, 0, _set("provenance.environment.environment_version", "v9")),
            "mixes environment versions",
        ),
        "nan": (_edit(traces, 0, _set("final.reward_detail.r_att", math.nan)), "must be a finite number"),
        "bool": (_edit(traces, 0, _set("final.reward_detail.r_success", True)), "must be a finite number"),
        "extra-component": (_edit(traces, 0, _set("final.reward_detail.r_extra", 0.5)), "different outcome key sets"),
        "reward-not-r_strict": (_edit(traces, 0, _set("final.reward", 0.99)), "differs from r_strict"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "extra",
        "failed",
        "duplicate-completed",
        "task",
        "split",
        "seed",
        "skills-in-bare",
        "missing-provenance",
        "checkpoint",
        "sampling",
        "prompt",
        "runtime",
        "environment",
        "environment-versions",
        "nan",
        "bool",
        "extra-component",
        "reward-not-r_strict",
    ],
)
def test_paired_validation_rejects(tmp_path: Path, case: str) -> None:
    """§14.2–§14.4 (Appendix A "Paired validation"): each broken bare trace set is refused by name."""
    run, plan, traces = _bare(tmp_path)
    _preflight(run, plan, traces)  # the clean run passes
    bad, message = _rejections(traces)[case]
    with pytest.raises(SkillError, match=message):
        _preflight(run, plan, bad)


def test_paired_validation_plan_mismatches_and_tolerances(tmp_path: Path) -> None:
    """§14.2 items 2–4 (Appendix A "Paired validation"): skills in the bare plan and checkpoint,
    sampling, prompt, environment and runtime mismatches are refused; concurrency, transport and
    source_path changes are tolerated; failed-then-completed traces are accepted."""
    from shopsimrl_core.skills._gate import preflight_bare_run

    run, plan, traces = _bare(tmp_path)
    gate = copy.deepcopy(plan)
    gate["model"]["transport"] = {"timeout_seconds": 1.0, "max_retries": 9, "retry_backoff_seconds": 0.1}
    gate["runtime"]["concurrency"] = 64
    gate["task_split"]["source_path"] = "/somewhere/else/splits.json"
    failed_first = [make_trace(19, split="val", status="failed")] + traces
    baseline = _preflight(run, gate, failed_first)
    assert baseline.digest["observations"] == 4
    for path, value, where in [
        ("model.checkpoint_id", "ck-2", "model"),
        ("model.sampling.temperature", 0.6, "model"),
        ("prompt.prompt_version", "other", "prompt"),
        ("environment.persona", False, "environment"),
        ("runtime.max_steps", 12, "runtime"),
        ("task_split.split_version", "v9", "task_split"),
    ]:
        other = copy.deepcopy(plan)
        _set(path, value)(other)
        with pytest.raises(SkillError, match=f"differs from the gate plan on {where}"):
            preflight_bare_run(run, other, send_seed=True)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    manifest["plan"]["skills"] = {"provider": "json_skillbank"}
    manifest["plan_fingerprint"] = fingerprint(manifest["plan"])
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(SkillError, match="must be skill-free"):
        preflight_bare_run(run, plan, send_seed=True)


def test_paired_validation_pairing_checks_mask_order(tmp_path: Path) -> None:
    """§14.4 (Appendix A "Paired validation", mask mismatch): treated chunk IDs must equal the frozen
    assignment, order included; a matching pair gives Δ = treated − bare."""
    from shopsimrl_core.skills._gate import pair_observations
    from shopsimrl_core.skills._gate_a import build_assignments

    run, plan, traces = _bare(tmp_path)
    bare = {t["episode_id"]: t for t in traces}
    jobs = [EpisodeJob.from_dict(j) for j in plan["jobs"]]
    chunks = ["chunk-27a7e5bb9344", "chunk-a9e98e128a35", "chunk-000000000003"]
    doc = build_assignments(jobs, chunks, mask_seed=20260901, draft_sha256="d")
    treated = {}
    for a in doc["assignments"]:
        t = copy.deepcopy(bare[a["episode_id"]])
        t["selected_skills"] = [{"skill_id": c} for c in a["included_chunk_ids"]]
        t["provenance"]["skills"] = {"provider": "gate_a_assigned"}
        t["final"]["reward"] += 0.25
        t["final"]["reward_detail"]["r_strict"] += 0.25
        treated[a["episode_id"]] = t
    rows = pair_observations(doc, treated, bare)
    assert [r["delta_reward"] for r in rows] == pytest.approx([0.25] * 4)
    target = next(a for a in doc["assignments"] if len(a["included_chunk_ids"]) >= 2)
    shuffled = copy.deepcopy(treated)
    shuffled[target["episode_id"]]["selected_skills"].reverse()
    with pytest.raises(SkillError, match="differ from the assignment"):
        pair_observations(doc, shuffled, bare)
    drifted = copy.deepcopy(treated)
    drifted[target["episode_id"]]["provenance"]["runtime"]["max_steps"] = 3
    with pytest.raises(SkillError, match="treated and bare provenance differ"):
        pair_observations(doc, drifted, bare)


# --------------------------------------------------------------------------- §22 items


def _config(tmp_path: Path, **overrides: Any):
    if not (tmp_path / "splits.json").exists():
        small_splits(tmp_path)
    return load_config(write_config(tmp_path, overrides=overrides))


def test_new_behaviour_duplicate_completed_is_counted(tmp_path: Path) -> None:
    """§22.4: on load the store detects duplicate completed records; the summary reports them in
    the additive ``counts.duplicate_completed`` (0 on a clean run)."""
    config = _config(tmp_path)
    result = run_evaluation(config, episode_fn=FakeEpisodes())
    assert result.counts.duplicate_completed == 0
    with open(result.traces_path, "a", encoding="utf-8") as handle:  # a second writer's copy of one episode
        handle.write(json.dumps(record(19, split="val")) + "\n")
    summary = summarize_run(result.run_dir)
    assert summary.counts.duplicate_completed == 1
    assert summary.counts.completed == 5 and summary.counts.coverage == 1.0


def test_new_behaviour_plan_warns_when_send_seed_is_false(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """§22.10: templates send seeds by default; ``plan`` warns on stderr when ``send_seed`` is false."""
    assert _config(tmp_path).model.send_seed is True
    assert cli_main(["plan", "--brief", str(write_config(tmp_path))]) == 0
    assert "send_seed" not in capsys.readouterr().err
    path = write_config(tmp_path, overrides={"model": {"send_seed": False}}, filename="noseed.yaml")
    assert cli_main(["plan", "--brief", str(path)]) == 0
    captured = capsys.readouterr()
    assert "warning: model.send_seed is false" in captured.err and json.loads(captured.out)["episodes"] == 5


def _seed_echo_transport(honour: bool) -> tuple[httpx.MockTransport, list[dict[str, Any]]]:
    """A model double whose answer depends on the request seed (honour) or on a call counter (not)."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        token = body["seed"] if honour else len(bodies)
        call = {
            "id": f"call-{len(bodies)}",
            "type": "function",
            "function": {"name": "search", "arguments": json.dumps({"query": f"围巾 {token}"})},
        }
        return httpx.Response(
            200,
            json={
                "id": f"r{len(bodies)}",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    }
                ],
            },
        )

    return httpx.MockTransport(handler), bodies


@pytest.mark.parametrize("honour", [True, False])
def test_new_behaviour_probe_seed_reports_seed_honoured(tmp_path: Path, honour: bool) -> None:
    """§22.10: the probe sends ONE seeded request twice (a seed even when send_seed is false) and
    reports whether the answers matched; call and response ids do not count."""
    import asyncio

    from shopsimrl_core import probe_seed

    plan = build_plan(_config(tmp_path, model={"send_seed": False}))
    transport, bodies = _seed_echo_transport(honour)
    result = asyncio.run(probe_seed(plan, transport=transport))
    assert result["seed_honoured"] is honour and result["seed"] == plan.jobs[0].seed
    assert len(bodies) == 2 and bodies[0] == bodies[1] and bodies[0]["seed"] == plan.jobs[0].seed
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["search"]


def test_new_behaviour_run_probe_seed_records_manifest_execution(tmp_path: Path) -> None:
    """§22.10: ``run --probe-seed`` records ``manifest.execution.seed_honoured`` (never fingerprinted);
    a plain run has no such key and the same fingerprint."""
    transport, bodies = _seed_echo_transport(True)
    probed = run_evaluation(_config(tmp_path), episode_fn=FakeEpisodes(), probe_seed=True, model_transport=transport)
    manifest = json.loads(probed.manifest_path.read_text(encoding="utf-8"))
    assert manifest["execution"]["seed_honoured"] is True and len(bodies) == 2
    invocation = json.loads((probed.run_dir / "invocations.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert invocation["execution"]["seed_honoured"] is True
    plain = run_evaluation(_config(tmp_path, experiment={"name": "plain"}), episode_fn=FakeEpisodes())
    plain_manifest = json.loads(plain.manifest_path.read_text(encoding="utf-8"))
    assert "seed_honoured" not in plain_manifest["execution"]
    assert plain_manifest["plan"]["model"] == manifest["plan"]["model"]


def test_new_behaviour_plan_probe_seed_against_the_real_policy(
    tmp_path: Path, sandbox: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """§22.10 over real loopback HTTP: the sandbox policy is seed-deterministic, so ``plan
    --probe-seed`` reports ``execution.seed_honoured: true`` and writes nothing."""
    small_splits(tmp_path)
    path = write_config(
        tmp_path,
        overrides={"model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "temperature": 0.6}},
    )
    assert cli_main(["plan", "--brief", "--probe-seed", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["execution"]["seed_honoured"] is True
    assert out["execution"]["seed_probe"]["first"]["tool_calls"]  # the policy answered with a tool call
    assert not (tmp_path / "runs").exists()


def test_new_behaviour_sft_filter_defaults(tmp_path: Path) -> None:
    """§22.8 default filter: latest records only, completed, r_success == 1, non-guarded split (by
    name or by the run's test-access opt-in), no protocol-error or policy-failure steps."""
    from testkit.core_runkit import manifest

    from shopsimrl_core.export._records import export_sft

    ok = make_trace(3, split="val")
    later_failed = make_trace(4, split="val", status="failed")
    run = tmp_path / "val-run"
    write_traces(
        run / "traces.jsonl",
        [ok, make_trace(4, split="val"), later_failed, make_trace(5, split="val", outcome="wrong_option")],
    )
    (run / "manifest.json").write_text(json.dumps(manifest("fp")), encoding="utf-8")
    out = tmp_path / "sft.jsonl"
    result = export_sft([run], out)
    assert [json.loads(line)["episode_id"] for line in out.read_text(encoding="utf-8").splitlines()] == [
        ok["episode_id"]
    ]
    assert result.skipped == 2  # task 4: latest record failed; task 5: r_success 0
    # a guarded split under another name: the run's manifest carries the test-access opt-in
    held = tmp_path / "holdout-run"
    write_traces(held / "traces.jsonl", [make_trace(3, split="holdout")])
    (held / "manifest.json").write_text(
        json.dumps(manifest("fp", plan={"task_split": {"name": "holdout"}}, test_access={"opted_in": True})),
        encoding="utf-8",
    )
    assert export_sft([held], tmp_path / "held.jsonl").records == 0


# --------------------------------------------------------------------------- Runtime (§9.6)


class _ClosingTransport(httpx.MockTransport):
    """A transport double that remembers being closed (the pooled client closes its transport)."""

    def __init__(self) -> None:
        super().__init__(lambda request: httpx.Response(500))
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("outcome", ["ok", "raise", "hang"])
def test_runtime_model_and_environment_always_closed(tmp_path: Path, outcome: str) -> None:
    """§9.6 (Appendix A "Runtime"): the run's pooled model and environment clients are closed when the
    run ends — after clean episodes, after an episode function that raises, and on cancellation."""
    import asyncio

    from shopsimrl_core import arun_evaluation

    model_t, env_t = _ClosingTransport(), _ClosingTransport()
    fake = FakeEpisodes({"task-000019__sample-000": [outcome]})
    config = _config(tmp_path, experiment={"max_episode_retries": 0})

    async def go() -> None:
        task = asyncio.create_task(
            arun_evaluation(config, episode_fn=fake, model_transport=model_t, env_transport=env_t)
        )
        if outcome == "hang":
            while "task-000019__sample-000" not in fake.calls:
                await asyncio.sleep(0.01)
            task.cancel()
        await task

    if outcome == "hang":
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(go())
    else:
        asyncio.run(go())
    # the environment client keeps two pools (reset without read timeout, other calls) over one
    # transport, and each pool closes it exactly once
    assert (model_t.closed, env_t.closed) == (1, 2)


# --------------------------------------------------------------------------- §22.3 retry-failed


def test_new_behaviour_retry_failed_reruns_only_failed_over_real_http(
    tmp_path: Path, sandbox: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """§22.3: ``retry-failed`` (= ``run --only-failed``) reruns only episodes whose latest record
    failed, against the real sandbox; on a directory without a run it refuses and writes nothing."""
    import yaml

    data = {
        "experiment": {
            "name": "retry",
            "output_dir": "runs",
            "seed": 20260830,
            "concurrency": 2,
            "max_episode_retries": 0,
        },
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 3},
        "environment": {"base_url": sandbox.env_url, "timeout": 30},
        "model": {
            "name": sandbox.served_model,
            "base_url": sandbox.policy_url,
            "api_key_env": None,
            "max_retries": 2,
            "retry_backoff_seconds": 0.05,
        },
    }
    path = tmp_path / "retry.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert cli_main(["retry-failed", "--progress", "none", str(path)]) == 2
    assert "error[nothing-to-retry]" in capsys.readouterr().err and not (tmp_path / "runs" / "retry").exists()

    config = load_config(path)
    jobs = build_plan(config).jobs
    failing = jobs[1].episode_id
    first = run_evaluation(config, episode_fn=FakeEpisodes({failing: ["fail"]}))
    assert first.counts.failed == 1 and first.counts.completed == 2
    assert cli_main(["retry-failed", "--progress", "none", str(path)]) in (0, 1)
    lines = [json.loads(line) for line in first.traces_path.read_text(encoding="utf-8").splitlines()]
    assert [line["episode_id"] for line in lines[3:]] == [failing]  # one new attempt, for the failed episode only
    assert lines[3]["provenance"]["model"]["model"] == sandbox.served_model and lines[3]["attempt"]["number"] == 2


# --------------------------------------------------------------------------- §22.10 seed width


def test_new_behaviour_seed_mod_2_32_identity_and_wire_seed(tmp_path: Path) -> None:
    """§22.10: ``model.seed_mod_2_32`` enters the sampling identity only when true (§1.1 rule 3), and
    then the wire seed (and ``request_seed``) is the per-call seed mod 2**32."""
    from shopsimrl_core import ChatModelClient

    default = build_plan(_config(tmp_path))
    assert "seed_mod_2_32" not in default.semantic["model"]["sampling"]
    assert "seed_mod_2_32" not in default.model_identity["sampling"]
    wide = build_plan(_config(tmp_path, model={"seed_mod_2_32": True}))
    assert wide.semantic["model"]["sampling"]["seed_mod_2_32"] is True and wide.fingerprint != default.fingerprint
    for flag, expected in [(False, 2**32 + 5), (True, 5)]:
        client = ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, seed_mod_2_32=flag)
        assert client.build_body([], None, 2**32 + 5)["seed"] == client.sent_seed(2**32 + 5) == expected
        assert ("seed_mod_2_32" in client.identity["sampling"]) is flag


@pytest.mark.parametrize("accepts_wide", [True, False])
def test_new_behaviour_wide_seed_preflight(tmp_path: Path, accepts_wide: bool) -> None:
    """§22.10: a run whose per-call seeds reach 2**32 checks once that the server takes such a seed and
    fails at preflight (``seed-too-wide``) if it does not; with ``seed_mod_2_32`` nothing is checked."""
    import asyncio

    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.runs.endpoints._seed_probe import check_seed_width, widest_call_seed

    seeds: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seed = json.loads(request.content)["seed"]
        seeds.append(seed)
        if seed >= 2**32 and not accepts_wide:
            return httpx.Response(400, json={"error": {"message": "seed must be a 32-bit integer"}})
        return httpx.Response(
            200,
            json={
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]
            },
        )

    transport = httpx.MockTransport(handler)
    narrow = build_plan(_config(tmp_path))
    asyncio.run(check_seed_width(narrow, transport=transport))
    assert seeds == []  # ordinary seeds: no request
    plan = build_plan(_config(tmp_path))
    plan.jobs = [EpisodeJob(19, 0, 2**32 - 3, "val")]
    assert widest_call_seed(plan) == 2**32 - 3 + plan.config.runtime.max_steps - 1
    if accepts_wide:
        asyncio.run(check_seed_width(plan, transport=transport))
    else:
        with pytest.raises(ConfigError, match="model.seed_mod_2_32") as info:
            asyncio.run(check_seed_width(plan, transport=transport))
        assert info.value.code == "seed-too-wide"
    assert seeds == [widest_call_seed(plan)]
    modded = build_plan(_config(tmp_path, model={"seed_mod_2_32": True}))
    modded.jobs = plan.jobs
    asyncio.run(check_seed_width(modded, transport=transport))
    assert len(seeds) == 1
