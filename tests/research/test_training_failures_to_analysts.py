"""A training round's "full-skill failure pending analysis" episodes are the online analysis's input set."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from testkit.training_sandbox import lapse_curriculum, policy_server, training_config, write_split_subset

from shopsimrl_core.skills import AnalystModel, Trace2SkillConfig, run_online_failure_analysis
from shopsimrl_core.skills.trace2skill._online import pending_analysis_episodes
from shopsimrl_core.training import TrainingSession, VLLMChatBackend

pytestmark = pytest.mark.slow

# every lapse at 1: every group fails bare; the full text of these chunks (each addresses one lapse) fixes some
# tasks in the retry (not internalized) and not others (pending analysis)
LAPSES = {"ignore_budget": 1.0, "first_option": 1.0, "impatient": 1.0, "terse_query": 1.0, "runner_up": 0.0}
CHUNKS = {"budget": "注意预算：价格不要超出预算。", "options": "每个规格都选与要求最接近的值，不要保留默认值。",
          "compare": "比较两三个商品，不合适就返回结果页换一个商品。", "query": "搜索词要包含商品的属性关键词。"}


def test_the_online_analysis_audits_exactly_the_pending_episodes(tmp_path: Path, sandbox: Any, analyst: Any) -> None:
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 6})
    out = tmp_path / "round-001"
    with policy_server(tmp_path, LAPSES) as url:
        config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=url, model="policy",
                                 extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        session = TrainingSession.from_config(config, backend=None, out_dir=out, group_size=2,
                                              curriculum=lapse_curriculum(CHUNKS))
        session.backend = VLLMChatBackend.from_model_config(session.plan.config.model)

        async def play() -> None:
            async with session:
                for task in session.plan.split.task_ids:
                    await session.play_group(task)

        asyncio.run(play())
    classes = [t.classification for t in session.triage()]
    pending = pending_analysis_episodes(out)
    assert "full_skill_failure_pending_analysis" in classes and len(pending) == 2 * classes.count(
        "full_skill_failure_pending_analysis")
    assert len(pending) < 2 * len(classes)  # other groups' failures are not the analysts' input
    bank = {"schema_version": "shopsimrl-skillbank-v1", "skills": [
        {"skill_id": k, "content": v, "enabled": True} for k, v in CHUNKS.items()]}
    doc = run_online_failure_analysis(
        Trace2SkillConfig(traces=out / "traces.jsonl", output_dir=tmp_path / "online", environment_url=sandbox.env_url,
                          analyst=AnalystModel(base_url=analyst.url, model="shopsim-analyst")),
        bank, round_id="round-001", proposal_checkpoint="step-10", episode_ids=pending)
    assert doc["input_episode_ids"] == pending
    assert doc["failures_audited"] == len(pending)
    audited = {json.loads(line)["episode_id"]
               for line in (tmp_path / "online" / "evidence_cards.jsonl").read_text(encoding="utf-8").splitlines()}
    assert audited == set(pending)
