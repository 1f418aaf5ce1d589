"""Run-page filters, sorting and paging, the label page and the SkillBank page over real HTTP."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from testkit.core_runkit import record, step

from shopsimrl_core import RunStore, label_run


def _ids(html: str) -> list[str]:
    return re.findall(r'class="episode" href="[^"]+">([^<]+)</a>', html)


def _run(root: Path) -> Path:
    run = root / "val" / "mixed"
    store = RunStore(run)
    for task in range(10):
        steps = [step(), step(protocol_error=task % 3 == 0)]
        store.append(
            record(
                task,
                reward=task / 10,
                steps=steps,
                r_success=1 if task >= 8 else 0,
                reason="purchase" if task % 2 else "action_limit",
                category="A" if task < 5 else "B",
            )
        )
    store.append(record(10, status="failed"))
    return run


def test_filters_sort_and_pages(tmp_path: Path, viewer_for) -> None:
    _run(tmp_path)
    base = viewer_for([tmp_path]).base_url + "/run/val/mixed"

    def ids(**query: str) -> list[str]:
        response = httpx.get(base, params=query, timeout=30, trust_env=False)
        assert response.status_code == 200
        return _ids(response.text)

    assert len(ids()) == 11
    assert ids(status="failed") == ["task-000010__sample-000"]
    assert ids(success="yes") == ["task-000008__sample-000", "task-000009__sample-000"]
    assert len(ids(success="no")) == 9
    assert ids(reward_min="0.25", reward_max="0.45") == ["task-000003__sample-000", "task-000004__sample-000"]
    assert ids(protocol="some") == [f"task-00000{t}__sample-000" for t in (0, 3, 6, 9)]
    assert ids(termination="action_limit", category="B") == ["task-000006__sample-000", "task-000008__sample-000"]
    assert ids(sort="reward", order="desc", per="3") == [f"task-00000{t}__sample-000" for t in (9, 8, 7)]
    assert ids(sort="reward", order="desc", per="3", page="2") == [f"task-00000{t}__sample-000" for t in (6, 5, 4)]
    assert ids(reward_min="not-a-number") == ids()  # a malformed bound is ignored, not an error


def test_label_page_lists_its_episodes(tmp_path: Path, viewer_for) -> None:
    run = _run(tmp_path)
    label_run(run)
    base = viewer_for([tmp_path]).base_url
    page = httpx.get(base + "/run/val/mixed/label/action_limit", timeout=30, trust_env=False)
    assert page.status_code == 200
    listed = re.findall(r'<td><a href="[^"]+">(task-[^<]+)</a></td>', page.text)
    assert listed and all(int(eid[5:11]) % 2 == 0 for eid in listed)
    filtered = httpx.get(base + "/run/val/mixed", params={"label": "action_limit"}, timeout=30, trust_env=False)
    assert _ids(filtered.text) == listed


def test_skillbank_page_shows_skill_text_and_evidence(tmp_path: Path, viewer_for) -> None:
    _run(tmp_path)
    bank_dir = tmp_path / "skillbanks"
    bank_dir.mkdir()
    bank = {
        "schema_version": "shopsimrl-skillbank-v1",
        "bank_version": "b1",
        "skills": [{"skill_id": "chunk-1", "version": "v1", "content": "先选规格 <b>再</b>买", "metadata": {}}],
    }
    (bank_dir / "bank.json").write_text(json.dumps(bank, ensure_ascii=False), encoding="utf-8")
    (bank_dir / "skill_candidates.json").write_text(
        json.dumps(
            {
                "candidates": [
                    {
                        "candidate_id": "chunk-1",
                        "evidence": [
                            {
                                "episode_id": "task-000004__sample-000",
                                "step_index": 2,
                                "role": "failure",
                                "label": "wrong_option",
                            }
                        ],
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    base = viewer_for([tmp_path]).base_url
    page = httpx.get(
        base + "/skillbank", params={"path": "skillbanks/bank.json", "run": "val/mixed"}, timeout=30, trust_env=False
    )
    assert page.status_code == 200
    assert "先选规格 &lt;b&gt;再&lt;/b&gt;买" in page.text
    assert 'href="/run/val/mixed/episode/task-000004__sample-000#step-2"' in page.text


def test_failed_episode_and_unknown_episode(tmp_path: Path, viewer_for) -> None:
    _run(tmp_path)
    base = viewer_for([tmp_path]).base_url + "/run/val/mixed/episode/"
    failed = httpx.get(base + "task-000010__sample-000", timeout=30, trust_env=False)
    assert failed.status_code == 200
    assert 'id="error"' in failed.text and "ModelRequestError" in failed.text and "No final state" in failed.text
    assert httpx.get(base + "task-999999__sample-000", timeout=30, trust_env=False).status_code == 404
