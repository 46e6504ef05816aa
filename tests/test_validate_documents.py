"""``squall validate`` on a file of several Topology resources: every document's errors, each under its name."""

from __future__ import annotations

import pathlib

import yaml

from squall.cli import main

WORDCOUNT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "wordcount.yaml"


def test_validate_reports_every_invalid_document_under_its_name_not_only_the_first(tmp_path, capsys):
    out = tmp_path / "wc.yaml"
    assert main(["submit", str(WORDCOUNT), "-o", str(out)]) == 0
    cr = yaml.safe_load(out.read_text())
    wired = {**cr, "metadata": {"name": "wired"}, "spec": {**cr["spec"], "name": "wired", "bolts": [
        {**cr["spec"]["bolts"][0], "inputs": [{"component": "nope"}]}, *cr["spec"]["bolts"][1:]]}}
    sized = {**cr, "metadata": {"name": "sized"}, "spec": {**cr["spec"], "name": "sized", "workers": 0}}
    many = tmp_path / "many.yaml"
    many.write_text(yaml.safe_dump_all([wired, cr, {"apiVersion": "v1", "kind": "ConfigMap"}, sized]))
    capsys.readouterr()
    assert main(["validate", str(many), "--no-imports"]) == 2
    result = capsys.readouterr()
    assert "topology 'wordcount' is valid" in result.out
    assert "squall validate: document 1, topology 'wired':\n  " in result.err and "unknown component 'nope'" in \
        result.err
    assert "squall validate: document 3, topology '(no name)':\n  " in result.err and "is a v1 ConfigMap" in result.err
    assert "squall validate: document 4, topology 'sized':\n  " in result.err and "workers" in result.err
    assert "3 of 4 documents are invalid" in result.err
