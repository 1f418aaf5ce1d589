"""Training with the runtime that evaluates: exact-token episodes, GRPO groups and their triage.

A training episode is an evaluation episode (``run_episode``: same prompt, tools, validation, protocol feedback,
leases, reward and termination) whose model also keeps, per turn, the exact prompt and sampled token ids and
their log-probabilities from a token backend (:class:`VLLMChatBackend`, :class:`SGLangGenerateBackend`,
``TransformersBackend``). Token samples, loss masks and triage live beside the evaluation trace, never in its
fields. Trainer adapters (slime, TRL, verifiers) sit in ``training/adapters/`` as optional extras.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "SamplingSpec": "_tokens",
    "TurnTokens": "_tokens",
    "TokenBackend": "_tokens",
    "TokenMismatch": "_tokens",
    "check_exact_sampling": "_tokens",
    "ChatTemplate": "_chat_template",
    "parse_assistant_text": "_chat_template",
    "VLLMChatBackend": "_backends",
    "SGLangGenerateBackend": "_backends",
    "TransformersBackend": "_inprocess",
    "CHATML_TOOLS_TEMPLATE": "_inprocess",
    "TokenRecordingModel": "_recorder",
    "TokenSample": "_samples",
    "build_samples": "_samples",
    "TrainingSession": "_session",
    "TrainingEpisode": "_session",
    "ChatModel": "_session",
    "classify_group": "_triage",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.training._backends import SGLangGenerateBackend as SGLangGenerateBackend
    from shopsimrl_core.training._backends import VLLMChatBackend as VLLMChatBackend
    from shopsimrl_core.training._chat_template import ChatTemplate as ChatTemplate
    from shopsimrl_core.training._chat_template import parse_assistant_text as parse_assistant_text
    from shopsimrl_core.training._inprocess import CHATML_TOOLS_TEMPLATE as CHATML_TOOLS_TEMPLATE
    from shopsimrl_core.training._inprocess import TransformersBackend as TransformersBackend
    from shopsimrl_core.training._recorder import TokenRecordingModel as TokenRecordingModel
    from shopsimrl_core.training._samples import TokenSample as TokenSample
    from shopsimrl_core.training._samples import build_samples as build_samples
    from shopsimrl_core.training._session import ChatModel as ChatModel
    from shopsimrl_core.training._session import TrainingEpisode as TrainingEpisode
    from shopsimrl_core.training._session import TrainingSession as TrainingSession
    from shopsimrl_core.training._tokens import SamplingSpec as SamplingSpec
    from shopsimrl_core.training._tokens import TokenBackend as TokenBackend
    from shopsimrl_core.training._tokens import TokenMismatch as TokenMismatch
    from shopsimrl_core.training._tokens import TurnTokens as TurnTokens
    from shopsimrl_core.training._tokens import check_exact_sampling as check_exact_sampling
    from shopsimrl_core.training._triage import classify_group as classify_group

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
