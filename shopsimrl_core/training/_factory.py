"""From a training config to the objects it names: the tokenizer, the token backend, the session.

``transformers`` (and torch, for the in-process backend) are imported only here and only when the config asks
for them; without the ``[trl]`` extra the message says which package to install.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shopsimrl_core._errors import ConfigError

if TYPE_CHECKING:
    from shopsimrl_core.runs.config._config import EvalConfig
    from shopsimrl_core.training._config import TrainingConfig
    from shopsimrl_core.training._session import TrainingSession
    from shopsimrl_core.training._tokens import TokenBackend

__all__ = ["load_tokenizer", "build_backend", "session_from_training_config"]

_INSTALL = "install the training extra: pip install 'shopsimrl[trl]'"


def _transformers() -> Any:
    # transformers warns at import that torch is missing: true, and beside the point for loading a tokenizer
    # (a torch-less backend needs none); a missing torch for the in-process backend fails on its own, in one line
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"backend.tokenizer: the transformers package is not installed; {_INSTALL}",
                          code="training-extra-missing") from None
    return transformers


def load_tokenizer(folder: str | os.PathLike[str], gguf_file: str | None = None, *, source: str = "backend") -> Any:
    """The tokenizer in *folder* (or the GGUF *gguf_file* inside it), offline.

    Raises:
        ConfigError: no such folder (``tokenizer-missing``), transformers not installed, or a folder that holds
            no tokenizer.
    """
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"{source}.tokenizer: {folder} is not a folder; point it at the policy's tokenizer "
                          "(the checkpoint folder)", code="tokenizer-missing")
    transformers = _transformers()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        if gguf_file:
            return transformers.AutoTokenizer.from_pretrained(str(path), gguf_file=gguf_file)
        return transformers.AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{source}.tokenizer: no tokenizer could be loaded from {folder} ({first}); point it at "
                          "the checkpoint folder", code="tokenizer-missing") from None


def build_backend(config: TrainingConfig, evaluation: EvalConfig) -> TokenBackend:
    """The token backend *config* names, defaults taken from the evaluation's ``model`` section.

    Raises:
        ConfigError: a tokenizer missing where the backend renders prompts itself, or one without a chat
            template or tool support (``tokenizer-no-chat-template`` / ``chat-template-no-tools``).
    """
    from shopsimrl_core.training._backends import SGLangGenerateBackend, VLLMChatBackend
    from shopsimrl_core.training._chat_template import ChatTemplate

    spec = config.backend
    model = evaluation.model
    if spec.kind == "vllm-chat":
        if spec.base_url or spec.model:
            model = model.model_copy(update={"base_url": spec.base_url or model.base_url,
                                             "name": spec.model or model.name, "base_urls": []})
        return VLLMChatBackend.from_model_config(model)
    folder = config.path(spec.tokenizer)
    if folder is None:
        raise ConfigError(f"{config.source}: backend.tokenizer: required for backend.kind {spec.kind!r} (the prompt "
                          "is rendered with the policy's tokenizer); name the checkpoint folder",
                          code="tokenizer-missing")
    tokenizer = load_tokenizer(folder, spec.gguf_file, source=f"{config.source}: backend")
    template = ChatTemplate(tokenizer, source=f"{config.source}: backend.tokenizer")
    if spec.kind == "sglang-generate":
        base = (spec.base_url or model.base_url).rstrip("/").removesuffix("/v1")
        return SGLangGenerateBackend(base, template, model=spec.model or model.name, auth=model.auth(),
                                     timeout=model.timeout)
    from shopsimrl_core.training._inprocess import TransformersBackend

    transformers = _transformers()
    kwargs = {"gguf_file": spec.gguf_file} if spec.gguf_file else {}
    policy = transformers.AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
    return TransformersBackend(policy, tokenizer, name=spec.model or model.name)


def session_from_training_config(path: str | os.PathLike[str], *, backend: TokenBackend | None = None,
                                 notice: Any = None) -> TrainingSession:
    """A :class:`TrainingSession` for the training YAML at *path* (backend built from it unless given).

    Raises:
        ConfigError: any problem of the training or the evaluation config, one line each.
    """
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.training._config import load_training_config
    from shopsimrl_core.training._session import TrainingSession

    config = load_training_config(Path(path))
    evaluation_path = config.path(config.evaluation)
    assert evaluation_path is not None
    evaluation = load_config(evaluation_path)
    from shopsimrl_core.training._tokens import check_exact_sampling

    check_exact_sampling(config.sampling.spec(), f"{config.source}: sampling")
    out_dir = config.path(config.out_dir)
    assert out_dir is not None
    curriculum = config.path(config.curriculum)
    chosen = backend if backend is not None else build_backend(config, evaluation)
    return TrainingSession.from_config(evaluation, backend=chosen, out_dir=out_dir, sampling=config.sampling.spec(),
                                       group_size=config.group_size, curriculum=curriculum,
                                       diagnostic_retry=config.diagnostic_retry, adapter=config.adapter,
                                       notice=notice)
