"""Exact tokens with the in-process backend and SmolLM2's tokenizer (issue 30, acceptance 3).

1. Real SmolLM2-135M episodes on the sandbox: decoding each sample's masked-in tokens, turn by turn, gives back the
   assistant turns of the trace (content, reasoning, tool calls) — every turn exactly once over the samples.
2. A chat template that drops earlier reasoning (written below) forks a new sample at the turn after the model
   reasoned; the same scripted answers without reasoning stay one sample.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from testkit.trainingkit import load_model, load_tokenizer, smollm2_gguf, train_config

from shopsimrl_core.training import SamplingSpec, TrainingSession
from shopsimrl_core.training._chat_template import parse_assistant_text
from shopsimrl_core.training._inprocess import TransformersBackend


class RecordingBackend:
    """Wraps a backend and keeps every turn it answered (prompt ids, sampled ids, logprobs), independently."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.turns: list[Any] = []

    @property
    def identity(self) -> dict[str, Any]:
        return dict(self.inner.identity)

    async def generate(self, messages: Any, tools: Any, *, seed: Any, sampling: Any) -> Any:
        body, tokens = await self.inner.generate(messages, tools, seed=seed, sampling=sampling)
        self.turns.append((list(tokens.prompt_ids), list(tokens.output_ids), list(tokens.output_logprobs)))
        return body, tokens

    async def aclose(self) -> None:
        await self.inner.aclose()


def turn_runs(sample: Any) -> list[list[int]]:
    """The masked-in tokens of a sample, one run per model turn (runs are separated by mask-0 tokens)."""
    runs: list[list[int]] = []
    previous = 0
    for token, keep in zip(sample.response_ids, sample.loss_mask):
        if keep and not previous:
            runs.append([])
        if keep:
            runs[-1].append(token)
        previous = keep
    return runs


def same_turn(parsed: dict[str, Any], step_model: dict[str, Any]) -> bool:
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.get("tool_calls", [])]
    traced = [(c["name"], c["raw_arguments"]) for c in step_model["tool_calls"]]
    return (parsed["content"] == step_model["content"] and parsed.get("reasoning_content") == step_model["reasoning"]
            and calls == traced)


def play_group(config: Path, out: Path, backend: Any, *, group_size: int, sampling: SamplingSpec) -> list[Any]:
    async def main() -> list[Any]:
        session = TrainingSession.from_config(config, backend=backend, out_dir=out, sampling=sampling,
                                              group_size=group_size)
        async with session:
            task = sorted(session.plan.split.task_ids)[0]
            return await session.play_group(task)

    return asyncio.run(main())


def test_decoded_masked_in_tokens_are_the_assistant_turns_of_the_trace(tmp_path: Path, sandbox: Any) -> None:
    tokenizer = load_tokenizer()
    backend = RecordingBackend(TransformersBackend(load_model(), tokenizer, name="smollm2-135m"))
    episodes = play_group(train_config(tmp_path, sandbox, max_steps=3), tmp_path / "train", backend,
                          group_size=2, sampling=SamplingSpec(temperature=0.7, max_tokens=64))

    assert len(backend.turns) >= 2
    outputs: dict[tuple[int, ...], list[tuple[list[int], list[float]]]] = {}
    for prompt, output, logprobs in backend.turns:  # a group's samples share their first prompt
        outputs.setdefault(tuple(prompt), []).append((output, logprobs))
    turns_seen = 0
    for episode in episodes:
        assert not episode.aborted, episode.record.get("error")
        steps = episode.record["steps"]
        covered = [turn for sample in episode.samples for turn in sample.turn_indices]
        assert covered == list(range(1, len(steps) + 1))  # every model turn in exactly one sample, in order
        for sample in episode.samples:
            runs = turn_runs(sample)
            assert len(runs) == len(sample.turn_indices)
            for turn, run in zip(sample.turn_indices, runs):
                text = tokenizer.decode(run, skip_special_tokens=True)
                assert same_turn(parse_assistant_text(text, "x"), steps[turn - 1]["model"]), (turn, text)
                turns_seen += 1
            # every masked-in run is exactly what the engine sampled after exactly that prefix, logprobs included
            position = 0
            for run in runs:
                start = next(i for i in range(position, len(sample.response_ids)) if sample.loss_mask[i])
                prefix = tuple(sample.prompt_ids + sample.response_ids[:start])
                end = start + len(run)
                assert (run, sample.rollout_logprobs[start:end]) in outputs[prefix]
                assert end == len(sample.response_ids) or not sample.loss_mask[end]  # the whole turn, no more
                position = end
            assert all(v == 0.0 for v, keep in zip(sample.rollout_logprobs, sample.loss_mask) if not keep)
    assert turns_seen == len(backend.turns)


# A ChatML template with Hermes tool calls that renders an earlier assistant turn from its content and tool calls
# only — its reasoning is dropped, as Qwen3's and DeepSeek-R1's templates do.
DROPS_REASONING = (
    "<|im_start|>system\n{{ messages[0].content }}\n<tools>\n"
    "{% for tool in tools or [] %}{{ tool | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{% for message in messages[1:] %}"
    "{% if message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}<tool_call>{\"name\": {{ call.function.name | tojson }}, "
    "\"arguments\": {{ call.function.arguments }}}</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CALL = '<tool_call>{"name": "search", "arguments": {"query": "red shoes"}}</tool_call>'


def scripted_model(tokenizer: Any, answers: list[str]) -> Any:
    """A tiny Llama whose logits put (almost) all mass on the next token of a scripted answer per turn.

    It is a real ``transformers`` model (``generate``, KV cache, logits processors all run); only its logits are
    replaced, so the backend's sampling and logprob path is the one a real policy goes through.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    scripts = [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id] for text in answers]

    class Scripted(LlamaForCausalLM):
        turn = -1
        produced = 0

        def forward(self, input_ids: Any = None, **kwargs: Any) -> Any:
            out = super().forward(input_ids=input_ids, **kwargs)
            if input_ids.shape[1] > 1:  # a prefill: a new turn starts
                Scripted.turn += 1
                Scripted.produced = 0
            script = scripts[min(Scripted.turn, len(scripts) - 1)]
            token = script[min(Scripted.produced, len(script) - 1)]
            Scripted.produced += 1
            logits = torch.zeros_like(out.logits)
            logits[..., token] = 40.0
            out.logits = logits
            return out

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    return Scripted(config).eval()


@pytest.mark.parametrize("reasoning", [False, True])
def test_a_template_that_drops_earlier_reasoning_forks_a_sample_at_the_drift_point(
        tmp_path: Path, sandbox: Any, reasoning: bool) -> None:
    tokenizer = load_tokenizer(DROPS_REASONING)
    think = "<think>\nThe user wants red shoes; search first.\n</think>\n" if reasoning else ""
    # turn 1 answers in prose (a protocol error: the page, hence the tool schemas in the system turn, stays the
    # same, so only the reasoning can make turn 2's prompt differ), turn 2 calls search
    answers = [think + "I will search for red shoes.", CALL]
    backend = RecordingBackend(TransformersBackend(scripted_model(tokenizer, answers), tokenizer, name="scripted"))
    (episode,) = play_group(train_config(tmp_path, sandbox, max_steps=2), tmp_path / "train", backend,
                            group_size=1, sampling=SamplingSpec(temperature=1.0, max_tokens=64))

    steps = episode.record["steps"]
    assert len(steps) == 2 and len(backend.turns) == 2
    assert (steps[0]["model"]["reasoning"] is not None) is reasoning
    assert steps[0]["protocol_error"]["code"] == "tool_call_count" and steps[0]["tools"] == steps[1]["tools"]
    (first_prompt, first_out, _), (second_prompt, second_out, _) = backend.turns
    extends = second_prompt[: len(first_prompt) + len(first_out)] == first_prompt + first_out
    block = episode.record["training"]
    if reasoning:
        # the second prompt renders turn 1 without its <think> block: it does not extend what was sampled
        assert not extends
        assert [s.turn_indices for s in episode.samples] == [[1], [2]]
        assert [s.reason for s in episode.samples] == ["first_turn", "template_drift"]
        assert episode.samples[1].prompt_ids == second_prompt  # the new sample starts AT the drift point
        assert block["checks"]["drift_forks"] == 1
    else:
        assert extends
        assert [s.turn_indices for s in episode.samples] == [[1, 2]]
        assert block["checks"]["drift_forks"] == 0
    # no sampled token lost or trained on twice: the masked-in tokens are exactly the two turns' samples
    assert [t for s in episode.samples for t in s.sampled_ids()] == first_out + second_out
    assert [s["turns"] for s in block["samples"]] == [s.turn_indices for s in episode.samples]



def tiny_random_model(tokenizer: Any, **generation: Any) -> Any:
    """A randomly initialised tiny Llama over SmolLM2's vocabulary (a spread-out distribution to sample from)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config).eval()
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    return model


MESSAGES = [{"role": "system", "content": "Shop."}, {"role": "user", "content": "Find red shoes."}]
TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search products",
                                           "parameters": {"type": "object", "properties": {
                                               "query": {"type": "string"}}, "required": ["query"]}}}]


def generate(backend: Any, seed: int | None, **sampling: Any) -> Any:
    return asyncio.run(backend.generate(MESSAGES, TOOLS, seed=seed, sampling=SamplingSpec(**sampling)))


def test_sampling_is_seeded_untruncated_and_its_logprobs_are_the_plain_softmax() -> None:
    import torch

    tokenizer = load_tokenizer()
    # the model's own config asks for top-k 5 and a repetition penalty: the backend turns both off
    model = tiny_random_model(tokenizer, top_k=5, repetition_penalty=1.3)
    backend = TransformersBackend(model, tokenizer, name="tiny")
    body, tokens = generate(backend, 7, temperature=0.8, max_tokens=12)
    again = generate(backend, 7, temperature=0.8, max_tokens=12)[1]
    other = generate(backend, 8, temperature=0.8, max_tokens=12)[1]
    assert tokens.output_ids == again.output_ids and tokens.output_logprobs == again.output_logprobs
    assert other.output_ids != tokens.output_ids
    assert tokens.finish_reason == "length" and len(tokens.output_ids) == 12
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 12
    # a forward pass over prompt + sampled ids gives the recorded logprobs (no top-k: transformers' default is 50,
    # which a random model's flat distribution would show at once)
    with torch.no_grad():
        logits = model(torch.tensor([tokens.prompt_ids + tokens.output_ids])).logits[0].float()
    start = len(tokens.prompt_ids) - 1
    forward = torch.log_softmax(logits[start:start + 12] / 0.8, dim=-1)
    recomputed = [float(forward[i, t]) for i, t in enumerate(tokens.output_ids)]
    assert max(abs(a - b) for a, b in zip(recomputed, tokens.output_logprobs)) < 1e-4
    assert min(tokens.output_logprobs) < -5  # a flat distribution over 49152 tokens: top-5 would cap near -1.6


def test_refusals_are_one_line() -> None:
    from transformers import AutoTokenizer

    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.training import TokenMismatch

    plain = load_tokenizer()
    plain.chat_template = None
    with pytest.raises(ConfigError) as no_template:
        TransformersBackend(tiny_random_model(plain), plain)
    gguf = smollm2_gguf()
    own = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)  # SmolLM2's template: no tools
    with pytest.raises(ConfigError) as no_tools:
        TransformersBackend(tiny_random_model(own), own)
    tokenizer = load_tokenizer()
    backend = TransformersBackend(tiny_random_model(tokenizer), tokenizer, name="tiny")
    with pytest.raises(ConfigError) as top_k:
        generate(backend, 1, top_k=50)
    with pytest.raises(ConfigError) as top_p:
        generate(backend, 1, top_p=0.9)
    # generation_config settings the backend does not neutralise and that reshape the distribution (here:
    # suppressed tokens) are refused, not recorded; a repetition penalty is neutralised (test above: plain softmax)
    suppressing = TransformersBackend(tiny_random_model(tokenizer, suppress_tokens=[5, 6]), tokenizer, name="sup")
    with pytest.raises(TokenMismatch) as reshaped:
        generate(suppressing, 1, max_tokens=4)
    codes = [e.value.code for e in (no_template, no_tools, top_k, top_p, reshaped)]
    assert codes == ["tokenizer-no-chat-template", "chat-template-no-tools", "exact-tokens-sampling",
                     "exact-tokens-sampling", "exact-tokens-broken"]
    assert all("\n" not in str(e.value) for e in (no_template, no_tools, top_k, top_p, reshaped))
