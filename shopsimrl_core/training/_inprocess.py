"""In-process token backend: a ``transformers`` model sampled in this process, exact tokens recorded (CPU tests, TRL).

The prompt is rendered with the policy's own tokenizer (:class:`ChatTemplate`: chat template applied, tools passed,
generation prompt added), sampled with ``model.generate`` from the *plain* softmax of the logits at the given
temperature — top-k and top-p explicitly off, because transformers' default ``top_k=50`` silently truncates the
distribution (measured in issue 30: up to 0.73 nats between the recorded logprob and a forward pass; 1.3e-5 with
top-k off) — and each sampled token's log-probability is read from the very scores it was sampled from. A model
whose ``generation_config`` still changes those scores (a repetition penalty, min-p, suppressed tokens ...) is
refused on the first turn rather than recorded with logprobs the trainer cannot reproduce.

The sampled text is parsed back into an assistant message (Hermes ``<tool_call>`` JSON, ``<think>`` reasoning) and
wrapped into an OpenAI chat-completion body, which the evaluation's own ``validate_completion`` then judges.

Torch is imported lazily (the ``[trl]`` extra): importing this module costs nothing without it.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from shopsimrl_core.training._chat_template import ChatTemplate, TokenizerLike, completion_body
from shopsimrl_core.training._tokens import SamplingSpec, TokenMismatch, TurnTokens, check_exact_sampling

__all__ = ["TransformersBackend", "CHATML_TOOLS_TEMPLATE", "NEUTRAL_GENERATION_SETTINGS", "SCORE_TOLERANCE"]

#: ``generate`` settings that would otherwise come from the model's ``generation_config`` (or transformers' global
#: defaults, ``top_k=50`` among them) and reshape the distribution sampled from; each set to its no-op value.
NEUTRAL_GENERATION_SETTINGS: dict[str, Any] = {
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "renormalize_logits": False,
    "num_beams": 1,
}

#: Largest difference allowed between the scores ``generate`` sampled from and ``logits / temperature`` (float32
#: rounding of the division); anything larger means a logits processor reshaped the distribution.
SCORE_TOLERANCE = 1e-4


#: A ChatML chat template with Hermes tool calls, for ChatML models whose own template ignores tools (SmolLM2's
#: does: :class:`ChatTemplate` refuses it). Tools are listed in the system turn inside ``<tools>``; an assistant
#: call is rendered ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` — the text the Hermes parser reads
#: back — and a tool result goes back as a user turn inside ``<tool_response>``. Earlier reasoning is not
#: rendered (the runtime never replays it). transformers renders chat templates with ``trim_blocks``, so a newline
#: right after a tag is written as an expression. Set it with ``tokenizer.chat_template = CHATML_TOOLS_TEMPLATE``.
CHATML_TOOLS_TEMPLATE = (
    "{% set system = messages[0].content if messages and messages[0].role == 'system' else none %}"
    "{% if tools or system is not none %}<|im_start|>system\n"
    "{% if system is not none %}{{ system }}{% endif %}"
    "{% if tools %}{% if system is not none %}{{ '\\n\\n' }}{% endif %}"
    "Call exactly one function per turn. Available functions (JSON schemas):\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools>\nAnswer with <tool_call>{\"name\": <function name>, \"arguments\": <JSON object>}</tool_call>"
    "{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for call in message.tool_calls or [] %}"
    "<tool_call>{\"name\": {{ call.function.name | tojson }}, \"arguments\": "
    "{% if call.function.arguments is string %}{{ call.function.arguments }}"
    "{% else %}{{ call.function.arguments | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _torch() -> Any:
    # through importlib: the core type-checks without torch installed (it is the [trl] extra's)
    return importlib.import_module("torch")


@dataclass(frozen=True)
class _Sampled:
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class TransformersBackend:
    """Exact tokens from a ``transformers`` causal LM sampled in this process (the contract's backend (c)).

    *model* is a ``PreTrainedModel`` (e.g. the policy a TRL trainer optimizes: rollouts then sample from the current
    weights), *tokenizer* its tokenizer; it must have a chat template that renders tools.

    Generation is blocking torch work: it runs in a worker thread (``asyncio.to_thread``) under one lock, so the
    episodes of a group run concurrently around it while the model samples one turn at a time. The lock is a
    thread lock, so one backend serves any number of event loops (TRL's rollout function starts one per batch).

    Raises (at construction):
        ConfigError (``tokenizer-no-chat-template``, ``chat-template-no-tools``): see :class:`ChatTemplate`.
    """

    def __init__(self, model: Any, tokenizer: TokenizerLike, *, name: str | None = None,
                 template: ChatTemplate | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or str(getattr(getattr(model, "config", None), "_name_or_path", "") or "in-process-model")
        self.template = template if template is not None else ChatTemplate(tokenizer, source=self.name)
        self._lock = threading.Lock()

    @property
    def identity(self) -> dict[str, Any]:
        """``{kind: transformers, model, dtype, transformers, torch, chat_template_sha256}``."""
        torch, transformers = _torch(), importlib.import_module("transformers")
        template = str(getattr(self.tokenizer, "chat_template", "") or "")
        return {
            "kind": "transformers",
            "model": self.name,
            "dtype": str(getattr(self.model, "dtype", "")).removeprefix("torch."),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "chat_template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
        }

    def stop_ids(self) -> list[int]:
        """The token ids that end a turn: the tokenizer's EOS and the model's ``generation_config.eos_token_id``."""
        ids: list[int] = []
        candidates: list[Any] = [getattr(self.tokenizer, "eos_token_id", None)]
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        candidates.extend(configured if isinstance(configured, (list, tuple)) else [configured])
        for value in candidates:
            if isinstance(value, int) and value not in ids:
                ids.append(value)
        return ids

    async def generate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                       seed: int | None, sampling: SamplingSpec) -> tuple[dict[str, Any], TurnTokens]:
        """Sample one assistant turn; the body is judged by ``validate_completion`` like a server's answer.

        Raises:
            ConfigError (``exact-tokens-sampling``): ``top_p`` != 1, a ``top_k``, or a temperature <= 0.
            TokenMismatch: the prompt leaves no room to sample in the model's context, or the scores ``generate``
                sampled from are not ``logits / temperature`` (the model's generation config reshapes them).
        """
        check_exact_sampling(sampling, f"{self.name}: sampling")
        prompt_ids = self.template.render(messages, tools)
        sampled = await asyncio.to_thread(self._sample, prompt_ids, seed, sampling)
        digest = hashlib.sha256(f"{seed}:{len(prompt_ids)}:{sampled.output_ids}".encode()).hexdigest()[:12]
        message = self.template.parse(sampled.output_ids, f"call-{digest}")
        body = completion_body(message, sampled.finish_reason, response_id=f"inprocess-{uuid.uuid4().hex[:16]}",
                               prompt_tokens=len(prompt_ids), completion_tokens=len(sampled.output_ids))
        body["model"] = self.name
        tokens = TurnTokens(prompt_ids=prompt_ids, output_ids=sampled.output_ids, output_logprobs=sampled.logprobs,
                            finish_reason=sampled.finish_reason)
        return body, tokens

    def _sample(self, prompt_ids: list[int], seed: int | None, sampling: SamplingSpec) -> _Sampled:
        """``model.generate`` under the lock, the global RNG forked so the trainer's own stream is untouched."""
        torch = _torch()

        with self._lock:
            limit = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
            budget = sampling.max_tokens
            if isinstance(limit, int):
                budget = min(budget, limit - len(prompt_ids))
            if budget < 1:
                raise TokenMismatch(f"{self.name}: the prompt has {len(prompt_ids)} tokens and fills the model's "
                                    f"context of {limit}; lower runtime.max_steps or shorten the prompt")
            stops = self.stop_ids()
            pad = getattr(self.tokenizer, "pad_token_id", None)
            was_training = bool(getattr(self.model, "training", False))
            device = next(self.model.parameters()).device
            self.model.eval()  # no dropout while sampling: the trainer recomputes these logprobs
            try:
                with torch.random.fork_rng(devices=[]), torch.no_grad():
                    if seed is not None:
                        torch.manual_seed(seed)
                    out = self.model.generate(
                        input_ids=torch.tensor([prompt_ids], device=device),
                        attention_mask=torch.ones((1, len(prompt_ids)), dtype=torch.long, device=device),
                        do_sample=True,
                        temperature=sampling.temperature,
                        max_new_tokens=budget,
                        eos_token_id=stops or None,
                        pad_token_id=pad if isinstance(pad, int) else (stops[0] if stops else None),
                        output_scores=True,
                        output_logits=True,
                        return_dict_in_generate=True,
                        **NEUTRAL_GENERATION_SETTINGS,
                    )
            finally:
                if was_training:
                    self.model.train()
            output_ids = [int(t) for t in out.sequences[0, len(prompt_ids):].tolist()]
            # a batch of one never pads; cut defensively at the first stop token all the same
            for position, token in enumerate(output_ids):
                if token in stops:
                    output_ids = output_ids[: position + 1]
                    break
            logprobs = self._logprobs(out.scores, out.logits, output_ids, sampling.temperature)
        finish = "stop" if output_ids and output_ids[-1] in stops else "length"
        return _Sampled(output_ids=output_ids, logprobs=logprobs, finish_reason=finish)

    def _logprobs(self, scores: Any, logits: Any, output_ids: list[int], temperature: float) -> list[float]:
        """Log-probabilities of the sampled tokens under the scores sampled from, each checked to be logits / T."""
        torch = _torch()

        values: list[float] = []
        for position, token in enumerate(output_ids):
            sampled_from = scores[position][0].float()
            plain = logits[position][0].float() / temperature
            # every token: a vocabulary-sized comparison is cheap next to the forward pass that made it
            difference = float((sampled_from - plain).abs().max())
            if not bool(torch.isfinite(sampled_from).all()) or difference > SCORE_TOLERANCE:
                raise TokenMismatch(
                    f"{self.name}: generate() sampled from scores that are not logits / temperature (max "
                    f"difference {difference:.3g}); the model's generation_config reshapes the distribution "
                    "(repetition penalty, suppressed tokens, min-p ...) — clear those fields")
            values.append(float(torch.log_softmax(sampled_from, dim=-1)[token]))
        return values

    async def aclose(self) -> None:
        """Nothing to release: the model belongs to the caller (e.g. the trainer)."""

