"""Every version string and fixed identifier of the on-disk and wire contracts.

These are data, normative byte for byte (runtime-semantics §1.3). Readers check a record's
``schema_version`` against these constants first and refuse versions they do not know.
"""

from __future__ import annotations

__all__ = [
    "TRACE_SCHEMA",
    "MANIFEST_SCHEMA",
    "SUMMARY_SCHEMA",
    "SKILLBANK_SCHEMA",
    "SPLIT_SCHEMA",
    "SERVER_RECORD_SCHEMA",
    "PIPELINE_VERSION",
    "ACTION_PROTOCOL",
    "PROMPT_VERSION",
    "SKILL_RENDERER_VERSION",
    "MODEL_PROVIDER",
    "ENVIRONMENT_ADAPTER",
    "INTERACTION_MODE",
    "KNOWN_ENVIRONMENT_VERSIONS",
    "KNOWN_OBSERVATION_VERSIONS",
    "REWARD_VERSION",
    "PAIRED_ESTIMATOR_NAME",
    "PAIRED_ESTIMATOR_FORMULA",
    "TEST_ACCESS_LEDGER_SCHEMA",
    "INVOCATION_SCHEMA",
    "EPISODE_LABELS_SCHEMA",
    "OWN_PROMPT_VERSION",
    "OWN_ACTION_PROTOCOL",
    "OWN_SKILL_RENDERER_VERSION",
    "OWN_PROMPT_VERSION_EN",
    "OWN_ACTION_PROTOCOL_EN",
    "OWN_SKILL_RENDERER_VERSION_EN",
    "PROMPT_TEXTS_SCHEMA",
    "JOB_PLAN_SCHEMA",
    "SUITE_PROGRESS_SCHEMA",
    "BEST_CHECKPOINT_SCHEMA",
    "SKILLBANK_POINTER_SCHEMA",
    "CHECKPOINT_ENTRY_SCHEMA",
    "TRAINING_BLOCK_SCHEMA",
    "TOKEN_SAMPLES_SCHEMA",
    "GROUP_TRIAGE_SCHEMA",
]

TRACE_SCHEMA = "shopsimrl-episode-v4"
MANIFEST_SCHEMA = "shopsimrl-run-manifest-v1"
SUMMARY_SCHEMA = "shopsimrl-eval-summary-v2"
SKILLBANK_SCHEMA = "shopsimrl-skillbank-v1"
SPLIT_SCHEMA = "shopsimrl-persona-splits-v1"
SERVER_RECORD_SCHEMA = "shopsimrl-server-record-v1"
PIPELINE_VERSION = "shopsimrl-v0.4"

# The project's own prompt and repair wording carries the legacy version strings only
# when the legacy texts are loaded; see _prompts.py for how identities are chosen.
ACTION_PROTOCOL = "openai-function-tools-repair-v3"
PROMPT_VERSION = "shopsim-shopping-agent-tools-v2"
SKILL_RENDERER_VERSION = "plain-skill-context-v1"

# The project's own texts (runtime-semantics §1.1 rule 5): the built-in system prompt, tool descriptions,
# repair instruction and skill-block lines are our wording, so they carry our own strings.
OWN_PROMPT_VERSION = "shopsimrl-shopping-agent-tools-zh-v1"
OWN_ACTION_PROTOCOL = "shopsimrl-function-tools-repair-zh-v1"
OWN_SKILL_RENDERER_VERSION = "shopsimrl-skill-context-zh-v1"
OWN_PROMPT_VERSION_EN = "shopsimrl-shopping-agent-tools-en-v1"
OWN_ACTION_PROTOCOL_EN = "shopsimrl-function-tools-repair-en-v1"
OWN_SKILL_RENDERER_VERSION_EN = "shopsimrl-skill-context-en-v1"
# A JSON file of protocol texts (tool descriptions, repair text, skill lines) plus the version
# strings they carry; loading a legacy one reproduces legacy identities.
PROMPT_TEXTS_SCHEMA = "shopsimrl-prompt-texts-v1"

MODEL_PROVIDER = "openai_compatible_http"
ENVIRONMENT_ADAPTER = "shopsimulator_http"
INTERACTION_MODE = "single_turn"

KNOWN_ENVIRONMENT_VERSIONS = frozenset({"shopsimulator-paper-aligned-v8"})
KNOWN_OBSERVATION_VERSIONS = frozenset({"shopping-observation-v7"})
REWARD_VERSION = "shopsimulator-paper-reward-v2"

PAIRED_ESTIMATOR_NAME = "paired_delta_ols_main_effects_no_intercept"
PAIRED_ESTIMATOR_FORMULA = "R_i - B_i = C_i^T beta + epsilon_i"

# Additive files of this project (not in the legacy harness).
TEST_ACCESS_LEDGER_SCHEMA = "shopsimrl-test-access-v1"
INVOCATION_SCHEMA = "shopsimrl-invocation-v1"
EPISODE_LABELS_SCHEMA = "shopsimrl-episode-labels-v1"

# Skills layer: legacy names from runtime-semantics §1.3 plus this project's additive files.
SKILL_CANDIDATES_SCHEMA = "shopsimrl-skill-candidates-v1"
INITIAL_DRAFT_SCHEMA = "shopsimrl-initial-skill-draft-v2"
GATE_A_MANIFEST_SCHEMA = "shopsimrl-trace2skill-gate-a-v2"
MASK_ASSIGNMENTS_SCHEMA = "shopsimrl-chunk-mask-assignments-v1"
CHUNK_CONTRIBUTIONS_SCHEMA = "shopsimrl-chunk-contributions-v2"
SFT_SCHEMA = "shopsimrl-sft-v1"
CANDIDATE_POOL_SCHEMA = "shopsimrl-skill-candidate-pool-v1"
ONLINE_GATE_MANIFEST_SCHEMA = "shopsimrl-online-validation-gate-v2"
ONLINE_ASSIGNMENTS_SCHEMA = "shopsimrl-online-skill-assignments-v1"
ONLINE_CONTRIBUTIONS_SCHEMA = "shopsimrl-online-chunk-contributions-v2"

# Files of the Dagster layer (shopsimrl_dagster). The job plan always carried its version; the others
# gained ``schema_version`` as an additive first key (readers accept files written without it).
JOB_PLAN_SCHEMA = "shopsimrl-suite-job-plan-v1"
SUITE_PROGRESS_SCHEMA = "shopsimrl-suite-progress-v1"
BEST_CHECKPOINT_SCHEMA = "shopsimrl-best-checkpoint-v1"
SKILLBANK_POINTER_SCHEMA = "shopsimrl-skillbank-pointer-v1"
CHECKPOINT_ENTRY_SCHEMA = "shopsimrl-checkpoint-entry-v1"

# Training with the runtime that evaluates (shopsimrl_core/training, docs/training.md): the trace's additive
# ``training`` block, the token sidecar's lines and the per-group triage document.
TRAINING_BLOCK_SCHEMA = "shopsimrl-training-block-v1"
TOKEN_SAMPLES_SCHEMA = "shopsimrl-token-samples-v1"
GROUP_TRIAGE_SCHEMA = "shopsimrl-grpo-triage-v1"
