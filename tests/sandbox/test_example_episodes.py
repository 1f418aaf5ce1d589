"""Acceptance 2: the spec's example episodes (§19.2–§19.5) replay byte-for-byte over real HTTP.

The only free choices of a server are the slot and the lease id, so the expected responses are
rewritten to the slot and lease this server handed out before comparing.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from .shop import Shop

EPISODES = json.loads((Path(__file__).parent / "data" / "example_episodes.json").read_text(encoding="utf-8"))


def _rewrite(value: Any, old_env: int, new_env: int, old_lease: str, new_lease: str) -> Any:
    if isinstance(value, dict):
        return {k: (new_env if k == "env_idx" and v == old_env else _rewrite(v, old_env, new_env, old_lease, new_lease))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, old_env, new_env, old_lease, new_lease) for v in value]
    if isinstance(value, str):
        return (value.replace(old_lease, new_lease).replace(f"slot-{old_env}-", f"slot-{new_env}-")
                .replace(f"environment {old_env}", f"environment {new_env}")
                .replace(f"Environment {old_env} ", f"Environment {new_env} "))
    return value


def _replay(shop: Shop, steps: list[dict], episode: dict | None = None) -> list[dict]:
    """Send every request of `steps`; compare each answer with the spec's; return the answers."""
    answers = []
    previous_state = None
    old_env = old_lease = None
    for number, step in enumerate(steps):
        request = copy.deepcopy(step["request"])
        if request["action"] == "reset":
            status, body = shop.post(request)
            old_env = step["response"]["result"]["env_idx"]
            old_lease = step["response"]["result"]["lease_id"]
            episode = {"env_idx": body["result"]["env_idx"], "lease_id": body["result"]["lease_id"]}
        else:
            assert episode is not None
            if old_env is None:
                old_env, old_lease = request["env_idx"], request["lease_id"]
            request["env_idx"], request["lease_id"] = episode["env_idx"], episode["lease_id"]
            status, body = shop.post(request)
        expected = _rewrite(step["response"], old_env, episode["env_idx"], old_lease, episode["lease_id"])
        assert status == step["http_status"], (number, status, body)
        result = body["result"]
        if "observation_state" not in expected["result"] and "observation_state" in result:
            # The spec omits an unchanged state; it equals the previous one with the new last_action.
            assert previous_state is not None
            assert result["observation_state"] == {**previous_state, "last_action": result["action_feedback"]}
            result = {k: v for k, v in result.items() if k != "observation_state"}
        assert {"result": result} == expected, f"step {number}: {step['request']}"
        # JSON equality treats 0 and 0.0 alike; the contract distinguishes them (§4.4).
        if "reward" in expected["result"]:
            assert type(result["reward"]) is type(expected["result"]["reward"]), (number, result["reward"])
        if "observation_state" in body["result"]:
            previous_state = body["result"]["observation_state"]
        answers.append(body["result"])
    return answers


@pytest.mark.parametrize("name", ["A", "B", "C"])
def test_example_episode_replays_exactly(example_shop: Shop, name: str) -> None:
    answers = _replay(example_shop, EPISODES[name])
    assert answers[0]["lease_id"] != "" and len(answers[0]["lease_id"]) == 32


def test_episode_a_rewards(example_shop: Shop) -> None:
    answers = _replay(example_shop, EPISODES["A"])
    purchase = answers[-2]
    assert purchase["reward"] == 1.0 and purchase["reward_detail"]["r_success"] == 1
    assert purchase["reward_detail"]["price_resolution"]["method"] == "selected_price_axis"


def test_episode_a_with_black_colour_scores_zero_strict(example_shop: Shop) -> None:
    """Checklist 45 (second half): same purchase with 颜色分类=黑色 → r_strict 0.0, r_loose 0.75, r_price 1.0."""
    episode = example_shop.reset(5000)
    for action in ["search[智能热洗洗地机]", "click[100000000101]", "click[颜色分类=黑色]", "click[尺码=标准版]"]:
        assert example_shop.step(episode, action)["action_feedback"]["valid"]
    final = example_shop.step(episode, "click[buy now]")
    detail = final["reward_detail"]
    assert (final["reward"], detail["r_strict"], detail["r_loose"], detail["r_price"]) == (0.0, 0.0, 0.75, 1.0)
    assert detail["num_option_matches"] == 0 and final["purchase"]["price"] == 2099.0
    example_shop.release(episode)


def test_automatic_action_limit_matches_spec(example_shop: Shop) -> None:
    episode = example_shop.reset(5001)
    for _ in range(29):
        answer = example_shop.step(episode, "click[]")
        assert answer["done"] is False and answer["reward"] == 0 and type(answer["reward"]) is int
    _replay(example_shop, EPISODES["limit"], episode)
    assert example_shop.terminate(episode, status=500) == {"error": "episode is already terminated"}
    example_shop.release(episode)
    assert example_shop.health()["free_slots"] == 8
