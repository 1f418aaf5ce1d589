import json

from testkit.tracegen import make_trace, write_traces

from shopsimrl_core.cli._main import main


def test_cli_labels_export_and_refusal(tmp_path, capsys):
    run = tmp_path / "run"
    write_traces(run / "traces.jsonl", [make_trace(1, reasoning="SECRET-R"), make_trace(2, outcome="wrong_option"),
                                        make_trace(3, outcome="wrong_option")])
    assert main(["labels", str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 3 and out["distribution"]["outcomes"] == {"success": 1, "wrong_option": 2}
    assert main(["export", "traces", str(run), str(tmp_path / "pub.jsonl"), "--profile", "public"]) == 0
    assert "SECRET-R" not in (tmp_path / "pub.jsonl").read_text()
    assert json.loads(capsys.readouterr().out)["records"] == 3
    assert main(["export", "sft", str(run), str(tmp_path / "sft.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 1
    assert main(["export", "traces", str(run), str(tmp_path / "traces.jsonl")]) == 2
    assert "must not be named traces.jsonl" in capsys.readouterr().err
    assert main(["candidates", str(run), str(tmp_path / "skills")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["accepted"] >= 1 and (tmp_path / "skills" / "initial_skillbank.json").is_file()
    assert main(["snapshot", str(tmp_path / "skills" / "initial_skillbank.json"), str(tmp_path / "banks")]) == 0
    snap = json.loads(capsys.readouterr().out)
    assert snap["path"].endswith(f"skillbank-{snap['bank_sha256']}.json")
