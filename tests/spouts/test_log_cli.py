"""`squall log produce | consume | describe`, in-process and as concurrent processes."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest

from squall.cli import main
from squall.spouts.log import DurableLog

SQUALL_LOG = [sys.executable, "-m", "squall", "log"]


def cli(*argv: str) -> int:
    return main(["log", *argv])


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def clicks(tmp_path):
    path = tmp_path / "clicks.jsonl"
    path.write_text("".join(json.dumps({"user": f"u{i % 3}", "n": i}) + "\n" for i in range(12)) + "\n")
    return path


def test_produce_consume_describe(tmp_path, clicks, capsys):
    db = str(tmp_path / "data" / "log.db")
    assert cli("produce", db, str(clicks), "--topic", "clicks", "--partitions", "3", "--key", "user") == 0
    assert "produced 12 record(s) to topic 'clicks'" in capsys.readouterr().out

    assert cli("consume", db, "--topic", "clicks") == 0
    records = lines(capsys.readouterr().out)
    assert sorted(r["value"]["n"] for r in records) == list(range(12))
    for r in records:
        assert r["key"] == r["value"]["user"] and r["topic"] == "clicks"
    by_user = {r["key"]: r["partition"] for r in records}
    assert all(by_user[r["key"]] == r["partition"] for r in records), "one partition per key"

    assert cli("describe", db) == 0
    out = capsys.readouterr().out
    assert "topic clicks: 3 partition(s)" in out and "PARTITION  START  END" in out
    assert "no group has committed offsets" in out


def test_consume_with_a_group_commits_what_it_printed_and_resumes(tmp_path, clicks, capsys):
    db = str(tmp_path / "log.db")
    cli("produce", db, str(clicks), "--topic", "clicks")
    capsys.readouterr()
    cli("consume", db, "--topic", "clicks", "--group", "g", "--max-records", "5")
    first = lines(capsys.readouterr().out)
    cli("consume", db, "--topic", "clicks", "--group", "g")
    rest = lines(capsys.readouterr().out)
    assert len(first) == 5 and sorted(r["value"]["n"] for r in first + rest) == list(range(12))

    cli("describe", db, "--json")
    [info] = lines(capsys.readouterr().out)
    assert info["partitions"] == [{"partition": 0, "start": 0, "end": 12}]
    assert [(g["group"], g["committed"], g["lag"]) for g in info["groups"]] == [("g", 12, 0)]


def test_produce_takes_its_input_file_after_the_options_too(tmp_path, clicks, capsys):
    """``produce LOG --topic T FILE``, as the help's usage line reads: argparse refused the file there."""
    db = str(tmp_path / "log.db")
    assert cli("produce", db, "--topic", "clicks", str(clicks)) == 0
    assert cli("produce", db, "--topic", "clicks", "--partitions", "1", str(clicks), "--key", "user") == 0
    assert "produced 12 record(s)" in capsys.readouterr().out
    log = DurableLog(db)
    assert len(log.read("clicks", 0, 0, 100)) == 24
    log.close()


def test_produce_from_stdin_reports_the_bad_line_and_keeps_the_ones_before(tmp_path, monkeypatch, capsys):
    db = str(tmp_path / "log.db")
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"a": 1}\n\n"two"\n{oops\n4\n'))
    assert cli("produce", db, "--topic", "t") == 2
    assert re.search(r"stdin line 4: not valid JSON .*the 2 record\(s\) before it were produced",
                     capsys.readouterr().err)
    log = DurableLog(db)
    assert [r.value for r in log.read("t", 0, 0, 10)] == [{"a": 1}, "two"]
    log.close()


def test_produce_refused_at_its_first_line_makes_no_topic_and_an_empty_input_makes_one(tmp_path, monkeypatch,
                                                                                       capsys):
    """The topic was made before the input was read: a first line refused left it with one partition, and
    the same command with --partitions 3 was then refused (found by the newcomer audit)."""
    db = str(tmp_path / "log.db")
    monkeypatch.setattr(sys, "stdin", io.StringIO("{oops\n"))
    assert cli("produce", db, "--topic", "t") == 2
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"a": 1}\n{"a": 2}\n'))
    assert cli("produce", db, "--topic", "t", "--partitions", "3") == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli("produce", db, "--topic", "empty") == 0
    log = DurableLog(db)
    assert (log.partition_count("t"), log.partition_count("empty")) == (3, 1)
    log.close()


def test_produce_with_a_key_needs_the_field(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"user": "a"}\n{"other": 1}\n'))
    assert cli("produce", str(tmp_path / "log.db"), "--topic", "t", "--key", "user") == 2
    assert "line 2: the value has no field 'user'" in capsys.readouterr().err


def test_consume_rejects_an_unknown_partition(tmp_path, clicks, capsys):
    db = str(tmp_path / "log.db")
    cli("produce", db, str(clicks), "--topic", "clicks", "--partitions", "2")
    assert cli("consume", db, "--topic", "clicks", "--partition", "5") == 2
    assert "--partition 5: topic 'clicks' has partitions 0 to 1" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["produce", "consume", "describe"])
def test_each_action_has_help(action, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(action, "--help")
    assert exit_.value.code == 0
    assert "--topic" in capsys.readouterr().out


def test_one_writer_and_two_readers_in_separate_processes(tmp_path):
    """A producer appends while two `consume --follow` processes read: both get every record, in order."""
    db = tmp_path / "log.db"
    total = 3000
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f"{i}\n" for i in range(total)))
    # The topic exists before the readers start, so they never race its creation.
    subprocess.run([*SQUALL_LOG, "produce", str(db), "--topic", "t", "--partitions", "2"],
                   input="", text=True, check=True, capture_output=True)

    readers = [subprocess.Popen([*SQUALL_LOG, "consume", str(db), "--topic", "t", "--group", g,
                                 "--follow", "--max-records", str(total)], stdout=subprocess.PIPE, text=True)
               for g in ("a", "b")]
    writer = subprocess.run([*SQUALL_LOG, "produce", str(db), str(source), "--topic", "t"],
                            capture_output=True, text=True, timeout=60)
    assert writer.returncode == 0, writer.stderr
    for reader in readers:
        out, _ = reader.communicate(timeout=60)
        assert reader.returncode == 0
        records = lines(out)
        assert sorted(r["value"] for r in records) == list(range(total))
        for p in (0, 1):
            offsets = [r["offset"] for r in records if r["partition"] == p]
            assert offsets == list(range(len(offsets))), "a reader saw a partition out of order"
    log = DurableLog(db)
    assert {g: {p: c.offset for p, c in cs.items()} for g, cs in log.groups("t").items()} == {
        "a": {0: total // 2, 1: total // 2}, "b": {0: total // 2, 1: total // 2}}
    log.close()
