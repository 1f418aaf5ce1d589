"""Trace2Skill as a ``CandidateProvider`` beside the rule miner.

``mine_candidates`` asks a provider per failure group. This provider runs the whole Trace2Skill
pipeline once (on first ``propose``; resumable, so a rerun costs no model call) over the traces it
was attached to, then answers each group with the compiled chunks whose evidence cards come from
that group's episodes (failing examples and contrasting successes). A chunk is given to one group
only, the first (by support) that claims it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from shopsimrl_core.skills import FailureGroup
from shopsimrl_core.skills.trace2skill._pipeline import Trace2SkillConfig, Trace2SkillResult, run_trace2skill
from shopsimrl_core.skills.trace2skill._prompts import PROMPT_VERSION, PROMPTS_SHA256

__all__ = ["Trace2SkillProvider"]


class Trace2SkillProvider:
    """``CandidateProvider`` backed by ``run_trace2skill`` (an analyst model and a live environment)."""

    def __init__(self, config: Trace2SkillConfig) -> None:
        self.config = config
        self.result: Trace2SkillResult | None = None
        self._given: set[str] = set()
        self.identity: dict[str, Any] = {"provider": "trace2skill", "prompt_version": PROMPT_VERSION,
                                         "prompts_sha256": PROMPTS_SHA256, "analyst_model": config.analyst.identity}

    def attach_traces(self, traces: dict[str, dict[str, Any]]) -> None:
        """Nothing to keep: the pipeline reads ``config.traces`` itself (the same file mine_candidates reads)."""

    def _run(self) -> Trace2SkillResult:
        if self.result is None:
            self.result = run_trace2skill(replace(self.config, traces=Path(self.config.traces)))
        return self.result

    def propose(self, group: FailureGroup) -> list[dict[str, Any]]:
        """The compiled chunks (chunk fields) drawn from this group's episodes, each chunk once."""
        import json

        result = self._run()
        draft = json.loads(Path(result.draft_path).read_text(encoding="utf-8")) if result.draft_path else {}
        episodes = {item["episode_id"] for item in group.failures + group.contrasts}
        out = []
        for chunk in draft.get("chunks", []):
            if chunk["chunk_id"] in self._given or not episodes & set(chunk.get("source_episode_ids", [])):
                continue
            self._given.add(chunk["chunk_id"])
            out.append({k: chunk[k] for k in ("title", "workflow_stage", "applicable_when", "procedure",
                                              "verification", "common_failure")})
        return out
