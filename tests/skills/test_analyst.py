import json

import pytest
from testkit.tracegen import make_trace

from shopsimrl_core._errors import SkillError
from shopsimrl_core.analysis._labels import label_episode
from shopsimrl_core.skills._analyst import REPAIR_INSTRUCTION, AnalystCandidateProvider
from shopsimrl_core.skills._candidates import build_failure_groups, propose_candidates
from shopsimrl_core.skills._firewall import context_from_traces


def _records():
    return [make_trace(t, 0, outcome="wrong_option") for t in range(3)] + [make_trace(t, 1) for t in range(3)]


def test_analyst_repairs_until_valid_over_real_http(stub, monkeypatch):
    base, log = stub
    log.write_text("")
    monkeypatch.setenv("ANALYST_TEST_KEY", "sk-test-123")
    recs = _records()
    groups = [g for g in build_failure_groups([label_episode(r) for r in recs]) if g.label == "outcome:wrong_option"]
    provider = AnalystCandidateProvider(base_url=base, model="analyst-1", api_key_env="ANALYST_TEST_KEY",
                                        retry_backoff_seconds=0)
    provider.attach_traces({r["episode_id"]: r for r in recs})
    out = propose_candidates(groups, provider, context_from_traces(recs))
    assert [c["status"] for c in out] == ["accepted"], out[0].get("reason")
    assert out[0]["provider"] == "analyst_model"
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(requests) == 3
    assert requests[0]["auth"] == "Bearer sk-test-123"
    first = requests[0]["body"]["messages"]
    assert len(first) == 2 and "640099999999" not in first[1]["content"]  # ids redacted in the prompt
    repair = json.loads(requests[2]["body"]["messages"][-1]["content"])["structured_output_repair"]
    assert len(requests[2]["body"]["messages"]) == 3  # original messages + ONE repair message
    assert "leakage firewall" in repair["contract_error"] and repair["instruction"] == REPAIR_INSTRUCTION
    assert requests[0]["body"]["tools"][0]["function"]["name"] == "submit_skill_chunk"
    assert "sk-test-123" not in json.dumps(provider.identity)
    assert provider.identity["prompt_version"] == "shopsimrl-skill-analyst-v1"


def test_analyst_gives_up_after_max_attempts(stub):
    base, _ = stub
    recs = _records()
    groups = [g for g in build_failure_groups([label_episode(r) for r in recs]) if g.label == "outcome:wrong_option"]
    provider = AnalystCandidateProvider(base_url=base, model="m", max_attempts=2, retry_backoff_seconds=0)
    provider.attach_traces({r["episode_id"]: r for r in recs})
    with pytest.raises(SkillError, match="still invalid after 2 attempts"):
        provider.propose(groups[0])
    out = propose_candidates(groups, provider, context_from_traces(recs))
    assert out[0]["status"] == "rejected" and "still invalid" in out[0]["reason"]
