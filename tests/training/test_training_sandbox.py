"""Training episodes over real HTTP against the sandbox: the runtime that evaluates, with exact tokens.

The policy server answers like vLLM with ``return_token_ids`` and ``logprobs`` (shopsim_sandbox.policy.tokens),
so the whole training path — token backend, recording model, samples, groups, triage — runs without a GPU.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from testkit.training_sandbox import lapse_curriculum, policy_server, training_config, write_split_subset

from shopsim_sandbox.policy import tokens as sandbox_tokens
from shopsimrl_core import load_config, run_evaluation
from shopsimrl_core._errors import ConfigError
from shopsimrl_core.documents import GroupTriage, TokenSampleLine
from shopsimrl_core.training import SamplingSpec, TrainingSession, VLLMChatBackend, parse_assistant_text

pytestmark = pytest.mark.slow

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
# Skill texts that address each lapse of the sandbox policy (its hint cues), and one that addresses none.
CUE_CHUNKS = {"budget": "注意预算：价格不要超出预算。", "options": "每个规格都选与要求最接近的值，不要保留默认值。",
              "compare": "比较两三个商品，不合适就返回结果页换一个商品。", "query": "搜索词要包含商品的属性关键词。"}
IDLE_CHUNKS = {"polite": "保持礼貌。"}
ALL_LAPSES = {"ignore_budget": 1.0, "first_option": 1.0, "impatient": 1.0, "terse_query": 1.0, "runner_up": 0.0}


def _session(config: Path, out: Path, **kwargs: Any) -> TrainingSession:
    session = TrainingSession.from_config(config, backend=None, out_dir=out, **kwargs)
    session.backend = VLLMChatBackend.from_model_config(session.plan.config.model)
    return session


def _play(session: TrainingSession, tasks: list[int]) -> list[Any]:
    async def go() -> list[Any]:
        async with session:
            return [episode for task in tasks for episode in await session.play_group(task)]

    return asyncio.run(go())


def _moves(record: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(s["action"], (s.get("protocol_error") or {}).get("code"), s["observation"],
             (s.get("environment") or {}).get("observation"), (s.get("environment") or {}).get("reward"))
            for s in record["steps"]]


def test_training_and_evaluation_play_the_same_episode(tmp_path: Path, sandbox: Any) -> None:
    """Acceptance 6: same task and seed through both paths → identical actions, observations, rewards, ends."""
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 4})
    config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                             model=sandbox.served_model, extra_body=NO_THINKING)
    result = run_evaluation(load_config(config))
    records = [json.loads(line) for line in (result.run_dir / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    evaluated = {record["job"]["task_id"]: record for record in records}
    session = _session(config, tmp_path / "train", sampling=SamplingSpec(temperature=1.0))
    episodes = _play(session, sorted(evaluated))
    assert len(episodes) == 4 and not any(e.aborted for e in episodes)
    for episode in episodes:
        twin = evaluated[episode.task_id]
        trained = episode.record
        assert trained["job"]["seed"] == twin["job"]["seed"]
        assert _moves(trained) == _moves(twin)
        assert trained["final"]["reward"] == twin["final"]["reward"]
        assert trained["final"].get("termination_reason") == twin["final"].get("termination_reason")
        assert trained["status"] == twin["status"] == "completed"
        # the evaluation trace's own fields hold no token data; it is all in the training block and the sidecar
        assert "training" not in twin and {"samples", "token_counts", "checks"} <= set(trained["training"])
        assert not any("token_ids" in json.dumps(step) for step in trained["steps"])


def test_sampled_tokens_are_the_assistant_turns_and_the_sidecar_matches(tmp_path: Path, sandbox: Any) -> None:
    """Decoding each sample's masked-in tokens gives back the trace's assistant turns, call for call."""
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 2})
    config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                             model=sandbox.served_model)  # thinking on: reasoning is sampled, then dropped
    out = tmp_path / "train"
    episodes = _play(_session(config, out, group_size=2), [0, 1])
    lines = [TokenSampleLine.parse(json.loads(line))
             for line in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == sum(len(e.samples) for e in episodes)
    for episode in episodes:
        steps = {s["step_index"]: s for s in episode.record["steps"]}
        for sample in episode.samples:
            assert sample.reason in ("first_turn", "template_drift")
            text = sandbox_tokens.decode(sample.sampled_ids())
            # one assistant turn per covered step, each ended by the sampled end-of-turn token
            turns = [part for part in text.split("\n<think>") if part]
            assert len(turns) == len(sample.turn_indices)
            for step_index, turn in zip(sample.turn_indices, turns):
                model = steps[step_index]["model"]
                parsed = parse_assistant_text(turn if turn.startswith("<think>") else "<think>" + turn, "c")
                assert parsed.get("reasoning_content") == model["reasoning"]
                assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.get("tool_calls", [])] \
                    == [(c["name"], c["raw_arguments"]) for c in model["tool_calls"]]
        block = episode.record["training"]
        # the template drops earlier reasoning: every later turn forks, and the block says so
        assert block["checks"]["drift_forks"] == len(episode.samples) - 1 >= 1
        assert block["token_counts"]["sampled"] == sum(s.sampled_count for s in episode.samples)
        mine = [line for line in lines if line.episode_id == episode.episode_id]
        assert [line.response_ids for line in mine] == [s.response_ids for s in episode.samples]
        assert all(line.reward == episode.reward for line in mine)


def test_triage_separates_what_skills_fix_from_what_they_cannot(tmp_path: Path, sandbox: Any) -> None:
    """Acceptance 4: fails bare, succeeds with the full skill text → not internalized; fails both → pending."""
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 3})
    with policy_server(tmp_path, ALL_LAPSES) as url:
        config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=url,
                                 model="policy", extra_body=NO_THINKING)
        fixed = _session(config, tmp_path / "cues", group_size=2, curriculum=lapse_curriculum(CUE_CHUNKS))
        _play(fixed, [1, 2])
        unfixable = _session(config, tmp_path / "idle", group_size=2, curriculum=lapse_curriculum(IDLE_CHUNKS))
        _play(unfixable, [1, 2])
        switched_off = _session(config, tmp_path / "off", group_size=2, curriculum=lapse_curriculum(CUE_CHUNKS),
                                diagnostic_retry=False)
        _play(switched_off, [1])
    docs = {folder: [GroupTriage.parse(json.loads(p.read_text(encoding="utf-8")))
                     for p in sorted((tmp_path / folder / "triage").glob("*.json"))]
            for folder in ("cues", "idle", "off")}
    assert [d.classification for d in docs["cues"]] == ["not_internalized", "not_internalized"]
    assert all(d.rewards == [0.0, 0.0] and d.diagnostic_retry and d.diagnostic_retry.success for d in docs["cues"])
    assert all(d.pending_analysis_episode_ids == [] for d in docs["cues"])
    assert [d.classification for d in docs["idle"]] == ["full_skill_failure_pending_analysis"] * 2
    assert docs["idle"][0].diagnostic_retry is not None
    assert docs["idle"][0].diagnostic_retry.included_chunk_ids == ["polite"]
    pending = [e for d in docs["idle"] for e in d.pending_analysis_episode_ids]
    assert len(pending) == 4
    assert [d.classification for d in docs["off"]] == ["retry_disabled"]
    # the retry is in the traces (for the analysts and the viewer) but never in the token sidecar
    traces = [json.loads(line) for line in (tmp_path / "idle" / "traces.jsonl").read_text().splitlines()]
    retries = [t for t in traces if t["training"]["diagnostic_retry"]]
    assert len(retries) == 2 and all(t["provenance"]["skills"]["included_chunk_ids"] == ["polite"] for t in retries)
    sidecar = (tmp_path / "idle" / "samples.jsonl").read_text().splitlines()
    assert {json.loads(line)["episode_id"] for line in sidecar} == set(pending)
    # every member of a group carried the group's one assignment (skill-free here, q = 1)
    members = [t for t in traces if not t["training"]["diagnostic_retry"]]
    assert all(t["provenance"]["skills"]["mode"] == "skill_free" for t in members)


def test_guards_refuse_in_one_line_and_write_nothing(tmp_path: Path, sandbox: Any) -> None:
    """A guarded split, a test task, a sample outside the group, a duplicate completion: one line each."""
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 2, "test": 2})
    test_task = json.loads(split.read_text(encoding="utf-8"))["splits"]["test"]["task_ids"][0]
    config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                             model=sandbox.served_model, extra_body=NO_THINKING)
    on_test = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                              model=sandbox.served_model, split="test", name="on-test")
    with pytest.raises(ConfigError) as caught:
        TrainingSession.from_config(on_test, backend=None, out_dir=tmp_path / "never")
    assert caught.value.code == "training-guarded-split" and "\n" not in str(caught.value)
    session = _session(config, tmp_path / "out", group_size=2)

    async def go() -> list[str]:
        codes = []
        async with session:
            for task, sample in ((test_task, 0), (0, 2), (0, -1)):
                try:
                    await session.play(task, sample)
                except ConfigError as exc:
                    codes.append(str(exc.code))
                    assert "\n" not in str(exc)
            await session.play(0, 0, group_index=0)
            try:
                await session.play(0, 0, group_index=0)
            except ConfigError as exc:
                codes.append(str(exc.code))
        return codes

    assert asyncio.run(go()) == ["training-guarded-split", "group-size-mismatch", "group-size-mismatch",
                                 "group-duplicate"]
    assert not (tmp_path / "never").exists()
    assert len((tmp_path / "out" / "traces.jsonl").read_text().splitlines()) == 1  # only the one real episode


def test_sglang_generate_backend_plays_the_same_episodes(tmp_path: Path, sandbox: Any) -> None:
    """The SGLang path: prompt rendered client-side with the policy's tokenizer, ids to /generate, Hermes parsed."""
    from shopsim_sandbox.policy.tokens import SandboxTokenizer
    from shopsimrl_core.training import ChatTemplate, SGLangGenerateBackend

    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 3})
    config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                             model=sandbox.served_model)
    chat = _session(config, tmp_path / "chat", group_size=1)
    by_chat = {e.task_id: e for e in _play(chat, [0, 1, 2])}
    template = ChatTemplate(SandboxTokenizer(), source="sandbox tokenizer")
    backend = SGLangGenerateBackend(sandbox.policy_url.removesuffix("/v1"), template, model=sandbox.served_model)
    native = TrainingSession.from_config(config, backend=backend, out_dir=tmp_path / "native", group_size=1)
    for episode in _play(native, [0, 1, 2]):
        twin = by_chat[episode.task_id]
        assert episode.record["training"]["backend"]["kind"] == "sglang-generate"
        assert _moves(episode.record) == _moves(twin.record)
        assert episode.reward == twin.reward and not episode.aborted
        # the same conversation rendered by the client gives the ids the server rendered itself
        assert [s.prompt_ids for s in episode.samples] == [s.prompt_ids for s in twin.samples]
        assert [s.sampled_ids() for s in episode.samples] == [s.sampled_ids() for s in twin.samples]


def test_a_template_without_tools_or_chat_template_is_refused(tmp_path: Path) -> None:
    from shopsim_sandbox.policy.tokens import SandboxTokenizer
    from shopsimrl_core.training import ChatTemplate

    class NoTools(SandboxTokenizer):
        def apply_chat_template(self, conversation: Any, tools: Any = None, **kwargs: Any) -> Any:
            return super().apply_chat_template(conversation, None, **kwargs)

    class NoTemplate(SandboxTokenizer):
        chat_template = None  # type: ignore[assignment]

    for tokenizer, code in ((NoTools(), "chat-template-no-tools"), (NoTemplate(), "tokenizer-no-chat-template")):
        with pytest.raises(ConfigError) as caught:
            ChatTemplate(tokenizer, source="tok")
        assert caught.value.code == code and "\n" not in str(caught.value)


def test_a_server_without_exact_tokens_aborts_the_episode_as_a_zero_loss_sample(tmp_path: Path, sandbox: Any) -> None:
    """An OpenAI server that ignores return_token_ids/logprobs: the episode aborts, its sample trains on nothing."""
    from http.server import BaseHTTPRequestHandler

    from testkit.loopback import threaded_server

    class PlainChat(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "鞋"}'}}
            body = json.dumps({"id": "x", "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                 "finish_reason": "tool_calls"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 1})
    with threaded_server(PlainChat) as port:
        config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url,
                                 policy_url=f"http://127.0.0.1:{port}/v1", model="plain")
        [episode] = _play(_session(config, tmp_path / "out", group_size=1), [0])
    assert episode.aborted and episode.reward == 0.0
    assert "return_token_ids" in episode.record["error"]["message"]
    assert episode.record["training"]["samples"][0]["reason"] == "aborted"
    assert [sum(s.loss_mask) for s in episode.samples] == [0]
    triage = json.loads(next((tmp_path / "out" / "triage").glob("*.json")).read_text(encoding="utf-8"))
    assert triage["classification"] == "environment_or_runtime_error"
