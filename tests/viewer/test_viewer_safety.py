"""The viewer over real HTTP (uvicorn on an ephemeral loopback port): planted markup arrives escaped,
paths outside the roots are refused, the Host header must be loopback."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from testkit.core_runkit import record, step

from shopsimrl_core import RunStore
from shopsimrl_core.viewer import PathRefused, ViewerRoots

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'


def _planted_run(root: Path) -> Path:
    run = root / "val" / "planted"
    rec = record(7, reward=0.25, reason="purchase", category="服饰" + SCRIPT)
    first = step()
    first["observation"] = "页面 " + SCRIPT + IMG
    first["model"].update(
        reasoning="想想 " + SCRIPT + IMG,
        content=None,
        tool_calls=[
            {"call_id": "c1", "name": "click", "arguments": {"value": IMG}, "raw_arguments": json.dumps({"value": IMG})}
        ],
    )
    first["action"] = "click[" + IMG + "]"
    rec["steps"] = [first]
    rec["reset"] = {"task_instruction": "买 " + SCRIPT, "user_persona": {"偏好": IMG + SCRIPT}}
    rec["conversation"] = [{"role": "system", "content": "系统 " + SCRIPT}]
    rec["final"]["goal"] = {"category": "服饰" + SCRIPT, "instruction_text": IMG}
    RunStore(run).append(rec)
    return run


def _get(base: str, path: str, **kw: object) -> httpx.Response:
    return httpx.get(base + path, timeout=30, trust_env=False, **kw)  # type: ignore[arg-type]


def test_planted_markup_in_reasoning_observation_and_persona_arrives_escaped(tmp_path: Path, viewer_for) -> None:
    _planted_run(tmp_path)
    server = viewer_for([tmp_path])
    response = _get(server.base_url, "/run/val/planted/episode/task-000007__sample-000")
    assert response.status_code == 200
    html = response.text
    assert "<script" not in html.lower() and "<img" not in html.lower()
    escaped_script = "&lt;script&gt;alert(1)&lt;/script&gt;"
    escaped_img = "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;"
    assert html.count(escaped_script) >= 4  # observation, reasoning, persona, system prompt, task
    assert html.count(escaped_img) >= 4  # observation, reasoning, persona, action, arguments, goal
    assert (
        "script-src" not in response.headers["content-security-policy"]
        and "default-src 'none'" in response.headers["content-security-policy"]
    )
    table = _get(server.base_url, "/run/val/planted").text  # the category column of the episode table
    assert "<script" not in table.lower() and escaped_script in table


def test_dot_dot_absolute_and_symlinked_paths_are_refused(tmp_path: Path, viewer_for) -> None:
    root = tmp_path / "runs"
    _planted_run(root)
    outside = _planted_run(tmp_path / "elsewhere")  # a real run directory, but outside the root
    (root / "val" / "escape").symlink_to(outside, target_is_directory=True)
    server = viewer_for([root])
    assert _get(server.base_url, "/run/val/planted").status_code == 200
    # httpx normalises a literal "/../" before sending, so dot segments are sent percent-encoded.
    for path in [
        "/run/val/%2e%2e/val/planted",
        "/run/val/%2e%2e/%2e%2e/elsewhere/val/planted",
        "/run/%2F" + str(outside).lstrip("/"),
        "/run/val/escape",
        "/run/val/escape/episode/task-000007__sample-000",
        "/compare?a=val/planted&b=../elsewhere/val/planted",
        "/compare?a=" + str(outside) + "&b=val/planted",
        "/skillbank?path=../../etc/passwd",
        "/skillbank?path=/etc/passwd",
    ]:
        response = _get(server.base_url, path)
        assert response.status_code in (400, 404), path
        assert "task-000007" not in response.text, path
    roots = ViewerRoots([root])
    for rel in ["..", "val/..", "/etc", str(outside), "val//planted", "val\\planted", "val/escape"]:
        with pytest.raises(PathRefused):
            roots.run(rel)
    assert roots.run("val/planted").path == (root / "val" / "planted").resolve()
    assert [r.rel for r in roots.runs()] == ["val/planted"]  # the symlink out is not listed either


def test_foreign_host_header_is_refused_on_loopback(tmp_path: Path, viewer_for) -> None:
    _planted_run(tmp_path)
    server = viewer_for([tmp_path])
    assert _get(server.base_url, "/", headers={"Host": "evil.example"}).status_code == 400
    assert _get(server.base_url, "/").status_code == 200
