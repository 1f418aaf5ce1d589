"""A training round's folder opens in the trace viewer like any run: listed, its episodes shown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from testkit.training_sandbox import training_config, write_split_subset

from shopsimrl_core.training import TrainingSession, VLLMChatBackend

pytestmark = pytest.mark.slow


def test_a_training_round_is_browsable(tmp_path: Path, sandbox: Any, viewer_for: Any) -> None:
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 2})
    config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                             model=sandbox.served_model)
    root = tmp_path / "training"
    session = TrainingSession.from_config(config, backend=None, out_dir=root / "round-001", group_size=2)
    session.backend = VLLMChatBackend.from_model_config(session.plan.config.model)

    async def play() -> list[Any]:
        async with session:
            return [e for t in session.plan.split.task_ids for e in await session.play_group(t)]

    episodes = asyncio.run(play())
    viewer = viewer_for([root])
    listing = httpx.get(viewer.base_url + "/", timeout=60)
    assert listing.status_code == 200 and "round-001" in listing.text
    episode = episodes[0]
    page = httpx.get(f"{viewer.base_url}/run/round-001/episode/{episode.episode_id}", timeout=60)
    assert page.status_code == 200, page.text[:500]
    action = episode.record["steps"][0]["action"]
    assert json.dumps(action, ensure_ascii=False)[1:-1].split("[")[0] in page.text  # e.g. "search"
