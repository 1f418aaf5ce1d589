"""The published curricula, rebuilt by ``build_curriculum`` (issue 23, acceptance 5; runtime-semantics §19.2).

Always on: ``tests/core/published/curricula.json`` holds the numbers of the four published
curriculum documents (``cold-start/curriculum.json`` = round-000, ``round-001..003/curriculum.json``):
each chunk's id, contribution and inclusion probability, the scale and its source name, and the
``state_id``. Our mapping must give every published ρ and scale bit for bit. It also holds the mode of
each of the 2,560 published training groups (``analysis/training_groups.csv``: 640 a round, as the
indices of the ``skill_free`` and ``assisted_empty`` ones; the rest are ``assisted``), which
``assign_group`` must reproduce from the state's numbers with the group key ``str(group_index)``.

Opt-in (``make test-published``): the documents themselves carry skill prose, which stays out of the
repository. Point ``SHOPSIMRL_PUBLISHED_ARTIFACTS`` at a folder laid out like the published
``artifacts/`` (at least ``<curriculum>.json`` and the selected SkillBank it was built from, found
by its ``source.skillbank_sha256``: ``round-00K/gate/selected_skillbank.json`` for round K+1,
``cold-start/selected_skillbank.json`` for round-000), and each published document is rebuilt from
that bank and its recorded parameters, ``state_id`` and every other key equal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from shopsimrl_core._hashing import fingerprint
from shopsimrl_core.skills._curriculum import assign_group, build_curriculum, curriculum_core

NUMBERS = Path(__file__).parents[1] / "core" / "published" / "curricula.json"
ENV = "SHOPSIMRL_PUBLISHED_ARTIFACTS"
DOCUMENTS = (
    "cold-start/curriculum.json",
    "round-001/curriculum.json",
    "round-002/curriculum.json",
    "round-003/curriculum.json",
)


def _published_numbers() -> list[dict[str, Any]]:
    curricula: list[dict[str, Any]] = json.loads(NUMBERS.read_text(encoding="utf-8"))["curricula"]
    return curricula


@pytest.mark.parametrize("published", _published_numbers(), ids=lambda p: p["round_id"])
def test_contributions_map_to_the_published_inclusion_probabilities(published: dict[str, Any]) -> None:
    # A bank of numbers only: each record's estimated effect is the published contribution.
    bank = {
        "schema_version": "shopsimrl-skillbank-v1",
        "skills": [
            {
                "skill_id": skill_id,
                "version": "1",
                "enabled": True,
                "content": "",
                "metadata": {"estimated_effect": contribution},
            }
            for skill_id, contribution, _ in published["chunks"]
        ],
    }
    state = build_curriculum(
        bank,
        round_id=published["round_id"],
        seed=published["seed"],
        skill_free_probability=published["skill_free_probability"],
        rho_min=published["rho_min"],
        rho_max=published["rho_max"],
    )
    mapping = state["source"]["probability_mapping"]
    assert mapping["name"] == "clipped_linear_positive_contribution"
    assert mapping["scale_source"] == published["scale_source"] == "largest_active_contribution"
    assert mapping["contribution_scale"] == published["contribution_scale"]
    got = [(c["skill_id"], c["contribution"], c["inclusion_probability"]) for c in state["chunks"]]
    assert got == [tuple(chunk) for chunk in published["chunks"]]  # floats compared with ==


@pytest.mark.parametrize("published", _published_numbers(), ids=lambda p: p["round_id"])
def test_every_published_training_group_gets_its_published_mode(published: dict[str, Any]) -> None:
    # assign_group reads only seed, state_id, q and each chunk's id and ρ: all numbers the fixture has.
    state = {
        "seed": published["seed"],
        "state_id": published["state_id"],
        "skill_free_probability": published["skill_free_probability"],
        "chunks": [{"skill_id": skill_id, "inclusion_probability": rho} for skill_id, _, rho in published["chunks"]],
    }
    groups = published["training_groups"]
    skill_free, empty = set(groups["skill_free"]), set(groups["assisted_empty"])
    first = groups["first_group_index"]
    wrong = []
    for index in range(first, first + groups["groups"]):
        want = "skill_free" if index in skill_free else "assisted_empty" if index in empty else "assisted"
        got = assign_group(state, str(index))["mode"]
        if got != want:
            wrong.append(f"group {index}: ours {got}, published {want}")
    assert not wrong, f"{len(wrong)}/{groups['groups']} groups differ:\n" + "\n".join(wrong[:20])


def _artifacts() -> Path:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(
            f"{ENV} is not set: point it at a folder laid out like the published artifacts/ "
            "(docs/skills.md, 'Published curricula') to rebuild the published curricula"
        )
    path = Path(root)
    if not path.is_dir():
        pytest.fail(f"{ENV}={root} is not a directory; point it at the published artifacts/ folder")
    return path


def _input_bank(root: Path, sha256: str) -> tuple[Path, dict[str, Any]] | None:
    """The selected SkillBank under *root* whose fingerprint is the curriculum's ``skillbank_sha256``."""
    for path in sorted([*root.glob("*/selected_skillbank.json"), *root.glob("*/gate/selected_skillbank.json")]):
        bank = json.loads(path.read_text(encoding="utf-8"))
        if fingerprint(bank) == sha256:
            return path, bank
    return None


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_published_curriculum_is_rebuilt_from_its_selected_bank(document: str) -> None:
    root = _artifacts()
    path = root / document
    if not path.is_file():
        pytest.skip(f"{path} is not there: fetch the published artifacts/{document}")
    published = json.loads(path.read_text(encoding="utf-8"))
    source = published["source"]
    found = _input_bank(root, source["skillbank_sha256"])
    if found is None:
        pytest.skip(
            f"no */selected_skillbank.json or */gate/selected_skillbank.json under {root} has fingerprint "
            f"{source['skillbank_sha256']} (the bank {document} was built from)"
        )
    bank_path, bank = found
    mapping = source["probability_mapping"]
    assert fingerprint(curriculum_core(published)) == published["state_id"]  # what the state id hashes
    rebuilt = build_curriculum(
        bank,
        round_id=published["round_id"],
        skillbank_path=source["skillbank_path"],
        seed=published["seed"],
        skill_free_probability=published["skill_free_probability"],
        rho_min=mapping["rho_min"],
        rho_max=mapping["rho_max"],
        created_at=published["created_at"],
    )
    assert rebuilt["state_id"] == published["state_id"], f"{document} from {bank_path}"
    assert rebuilt == published and list(rebuilt) == list(published)
