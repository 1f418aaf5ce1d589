"""Split files: the real frozen split's counts and hashes, legacy ranges, validation, guarded roles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testkit.core_runkit import PERSONA_SPLITS, write_split

from shopsimrl_core import ConfigError, fingerprint, load_split_file


def test_published_split_counts_and_hashes() -> None:
    split_file = load_split_file(PERSONA_SPLITS)
    assert split_file.version == "shopsimrl-persona-splits-v1"
    expected = {
        "train": (3726, [0, 2, 3, 4, 6, 9], "6dd57881e170a459770c1977cdf06dd184d4dacab8eb1101ebd52c695a85cac9"),
        "val": (400, [19, 20, 30, 31, 47, 54], "103c72fd5da76870d2406420a8d7eab0c616780cb6fb8ac27875b5424dae872e"),
        "test": (400, [1, 5, 8, 16, 42, 45], "4137a041471b29310c7e349732c55f04e8ea1c9a517cd60475d048ca1466c257"),
    }
    for name, (count, first, digest) in expected.items():
        split = split_file.get(name)
        assert split.task_count == count
        assert list(split.task_ids[:6]) == first
        assert split.task_ids_sha256 == digest and split.hash_declared
        assert split.persona is True and split.role == name
    assert split_file.get("test").guarded and not split_file.get("val").guarded


def test_spec_example_hashes(tmp_path: Path) -> None:
    path = write_split(tmp_path / "s.json", {
        "train": {"role": "train", "persona": True, "task_ids": [0, 2, 3, 7],
                  "task_ids_sha256": "2249b2be89f593906a798b8d44d97828c1926b9f2ef96b52027514b2bdd8cb76"},
        "val": {"role": "val", "persona": True, "task_ids": [19, 20, 30, 31, 47],
                "task_ids_sha256": "100f5e07b41f6c1391a2a4ffb07debcf217e2628821c8bab16753e074484dfee"},
        "legacy_range": {"start": 100, "end": 110, "persona": None},
    })
    loaded = load_split_file(path)
    assert loaded.get("legacy_range").task_ids == tuple(range(100, 110))
    assert loaded.get("legacy_range").task_ids_sha256 == fingerprint(list(range(100, 110)))
    assert loaded.get("legacy_range").persona is None and loaded.get("legacy_range").role is None


def test_edited_id_list_fails_hash_check(tmp_path: Path) -> None:
    data = json.loads(PERSONA_SPLITS.read_text(encoding="utf-8"))
    data["splits"]["val"]["task_ids"][0] = 18
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"splits\.val\.task_ids_sha256: does not match the task ids"):
        load_split_file(path)


@pytest.mark.parametrize(("body", "message"), [
    ({"task_ids": [1, True]}, r"task_ids\.1: must be a non-negative int \(got True\)"),
    ({"task_ids": [1, -2]}, r"task_ids\.1: must be a non-negative int"),
    ({"task_ids": [3, 4, 3]}, r"task_ids\.2: duplicate task id 3"),
    ({"task_ids": [1], "persona": "yes"}, r"persona: must be true, false or null"),
    ({"start": 5, "end": 2}, r"legacy range needs ints"),
    ({"persona": True}, r"has neither task_ids nor start/end"),
])
def test_invalid_splits(tmp_path: Path, body: dict, message: str) -> None:
    path = write_split(tmp_path / "s.json", {"x": body})
    with pytest.raises(ConfigError, match=message):
        load_split_file(path)


def test_unknown_split_lists_available(tmp_path: Path) -> None:
    loaded = load_split_file(write_split(tmp_path / "s.json", {"b": {"task_ids": [1]}, "a": {"task_ids": [2]}}))
    with pytest.raises(ConfigError, match=r"split 'vall' not found; available splits: a, b"):
        loaded.get("vall")


def test_test_named_split_without_role_is_guarded(tmp_path: Path) -> None:
    loaded = load_split_file(
        write_split(
            tmp_path / "s.json",
            {
                "test": {"task_ids": [1]},
                "holdout": {"task_ids": [2], "role": "test"},
                "other": {"task_ids": [3], "role": "val"},
            },
        )
    )
    assert loaded.get("test").guarded and loaded.get("holdout").guarded and not loaded.get("other").guarded


SANDBOX_SPLITS = PERSONA_SPLITS.parent / "sandbox" / "persona_splits.sandbox.json"


def _with_test_task_in_val(tmp_path: Path, *, drop_checks: bool = False) -> tuple[Path, int]:
    """Issue 33's walk-around: a copy of the sandbox split file, a test task added to val, val's hash and count
    dropped so the hash check has nothing to compare (and, optionally, the ``checks`` block deleted too)."""
    data = json.loads(SANDBOX_SPLITS.read_text(encoding="utf-8"))
    smuggled = data["splits"]["test"]["task_ids"][3]
    val = data["splits"]["val"]
    val["task_ids"].append(smuggled)
    del val["task_ids_sha256"], val["task_count"]
    if drop_checks:
        del data["checks"]
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, smuggled


@pytest.mark.parametrize("drop_checks", [False, True], ids=["checks-kept", "checks-deleted"])
def test_a_test_task_added_to_val_is_refused_at_load(tmp_path: Path, drop_checks: bool) -> None:
    path, smuggled = _with_test_task_in_val(tmp_path, drop_checks=drop_checks)
    with pytest.raises(ConfigError) as caught:
        load_split_file(path)
    assert caught.value.code == "split-invalid"
    assert f"splits.val.task_ids.60: task {smuggled} is also in split 'test'" in str(caught.value)


def test_every_loader_of_an_edited_split_file_refuses_it(tmp_path: Path) -> None:
    """The training export loads through the same reader (the CLI and Dagster planning do too; the bad-input
    catalogue runs `shopsimrl plan` and `run` on this file): training on `train` is refused though train is
    untouched, because the file as a whole is not what it declares."""
    from shopsimrl_core.export import export_slime_tasks

    path, smuggled = _with_test_task_in_val(tmp_path)
    out = tmp_path / "tasks.jsonl"
    with pytest.raises(ConfigError, match=rf"task {smuggled} is also in split 'test'"):
        export_slime_tasks(path, "train", out)
    assert not out.exists()


def test_declared_checks_hold(tmp_path: Path) -> None:
    """`pairwise_task_disjoint` between unguarded splits, `test_exclusions_respected`, and the
    `persona_task_count` of a `complete_coverage` file are checked when declared, and only then."""
    splits = {"train": {"role": "train", "task_ids": [1, 2, 3]}, "val": {"role": "val", "task_ids": [3, 4]},
              "test": {"role": "test", "task_ids": [5, 6]}}

    def write(checks: dict | None, policy: dict | None = None) -> Path:
        body: dict = {"version": "v", "splits": splits}
        if checks is not None:
            body["checks"] = checks
        if policy is not None:
            body["policy"] = policy
        path = tmp_path / "s.json"
        path.write_text(json.dumps(body), encoding="utf-8")
        return path

    # train and val share task 3: allowed unless the file promises disjoint splits
    assert load_split_file(write(None)).get("val").task_ids == (3, 4)
    with pytest.raises(ConfigError, match=r"splits\.val\.task_ids\.0: task 3 is also in split 'train'; "
                                          r"checks\.pairwise_task_disjoint is true"):
        load_split_file(write({"pairwise_task_disjoint": True}))
    splits["val"]["task_ids"] = [4]
    with pytest.raises(ConfigError, match=r"splits\.test\.task_ids: holds task 6, which policy\.test_excluded"):
        load_split_file(write({"test_exclusions_respected": True}, {"test_excluded_task_ids": [6]}))
    with pytest.raises(ConfigError, match=r"checks\.persona_task_count: says 7 but the persona splits hold 6"):
        load_split_file(write({"complete_coverage": True, "persona_task_count": 7}))
    assert load_split_file(write({"complete_coverage": True, "persona_task_count": 6, "pairwise_task_disjoint": True,
                                  "test_exclusions_respected": True}, {"test_excluded_task_ids": [9]}))
    with pytest.raises(ConfigError, match=r"checks\.pairwise_task_disjoint: must be true or false"):
        load_split_file(write({"pairwise_task_disjoint": "yes"}))
