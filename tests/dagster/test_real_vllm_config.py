"""What `make test-real-vllm` ships besides its script: its pipeline settings still validate (a settings change
that breaks them would only show in that opt-in check), and its SmolLM2 chat template writes tool calls in the
`<tool_call>{json}</tool_call>` form vLLM's `hermes` parser reads, for replayed calls whose arguments are a
JSON string (the OpenAI wire form) or an object.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "configs" / "real-vllm"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search products by keywords.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "Short product keywords."}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "click",
            "description": "Click a value on the page.",
            "parameters": {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]},
        },
    },
]


def test_the_real_vllm_settings_validate_as_the_script_fills_them(tmp_path: Path) -> None:
    settings = yaml.safe_load((CONFIG_DIR / "pipeline.yaml").read_text(encoding="utf-8"))
    # What scripts/test-real-vllm.sh fills in before it points the pipeline at the file.
    settings["environment"]["base_url"] = "http://127.0.0.1:45737"
    settings["inference"]["launch"]["env"]["PATH"] = "/opt/vllm-venv/bin:/usr/bin"
    settings["inference"]["launch"]["extra_args"] = [
        "--chat-template", str(CONFIG_DIR / "smollm2-tools.jinja"), "--max-model-len", "4096",
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")

    loaded = load_pipeline_settings(path)

    assert loaded.inference.mode == "launch"
    assert loaded.inference.launch is not None
    serve = loaded.inference.launch.core()
    assert serve.server == "vllm"
    assert serve.env["PATH"].startswith("/opt/vllm-venv/bin:")
    assert serve.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert serve.extra_args[:2] == ["--chat-template", str(CONFIG_DIR / "smollm2-tools.jinja")]
    assert loaded.runs_root == tmp_path / "runs"


def _render(messages: list[dict[str, object]]) -> str:
    # transformers renders chat templates in a sandboxed Jinja environment with trim_blocks/lstrip_blocks.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string((CONFIG_DIR / "smollm2-tools.jinja").read_text(encoding="utf-8"))
    return template.render(messages=messages, tools=TOOLS, add_generation_prompt=True)


def test_the_smollm2_template_lists_the_tools_and_replays_calls_in_hermes_form() -> None:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "Shop for the user."},
        {"role": "user", "content": "Find a desk lamp."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "desk lamp"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "results page"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "click", "arguments": {"value": "lamp 1"}}},
        ]},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "product page"}]},
    ]

    text = _render(messages)

    assert text.startswith("<|im_start|>system\nShop for the user.")
    assert "- search(query): Search products by keywords." in text
    assert "- click(value): Click a value on the page." in text
    calls = [json.loads(body) for body in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, flags=re.S)]
    # The first is the call form the system turn shows; then the two replayed calls, both as JSON objects.
    assert calls == [
        {"name": "search", "arguments": {"query": "..."}},
        {"name": "search", "arguments": {"query": "desk lamp"}},
        {"name": "click", "arguments": {"value": "lamp 1"}},
    ]
    assert "<tool_response>\nresults page\n</tool_response>" in text
    assert "<tool_response>\nproduct page\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
