"""The bench's own arithmetic: bench/ab.py reads the table bench/wordcount.py prints (the figures it compares
are the printed ones), and bench/scaleout.py fits and predicts as docs/performance.md says; and bench/codec.py
still runs against the codec as it is; and the API floor runs the bench's whole user code."""

from __future__ import annotations

import sys

import pytest
from bench import codec as codec_bench
from bench.ab import parse_table, summary, target_ratios
from bench.scaleout import Run, crossing, fit, predict
from bench.wordcount import VOCABULARY, WORDS, Result, floor_components, table


def printed(capsys: pytest.CaptureFixture[str], rows: list[Result]) -> str:
    table(rows)
    return capsys.readouterr().out


def test_the_table_wordcount_prints_is_read_back_row_by_row(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, [Result("ceiling: hand-written loop", 2_000_000, 10.0, 9.0),
                           Result("in-process (LocalCluster)", 1_000_000, 10.0, 9.5),
                           Result("2 workers + 2 ackers", 900_000, 10.0, 14.4, acker_cpu=0.1, frames=0.006)])
    rows = parse_table(out)
    assert list(rows) == ["ceiling: hand-written loop", "in-process (LocalCluster)", "2 workers + 2 ackers"]
    assert (rows["ceiling: hand-written loop"].rate, rows["ceiling: hand-written loop"].cpu) == (200_000, 4.5)
    assert (rows["2 workers + 2 ackers"].rate, rows["2 workers + 2 ackers"].cpu) == (90_000, 16.0)
    ratios = target_ratios(rows)
    assert ratios["in-process trees/s ÷ ceiling trees/s"] == pytest.approx(0.5)
    assert ratios["CPU µs/tree: 2 workers + 2 ackers ÷ in-process"] == pytest.approx(16.0 / 9.5)
    assert "CPU µs/tree: 1 worker + 1 acker ÷ in-process" not in ratios  # no such row in this run


def test_the_summary_gives_each_pairs_figures_and_this_over_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    def run(local_cpu: float, ceiling_cpu: float) -> dict:
        return parse_table(printed(capsys, [Result("ceiling: hand-written loop", 1_000_000, 5.0, ceiling_cpu),
                                            Result("in-process (LocalCluster)", 1_000_000, 10.0, local_cpu)]))

    lines = summary([run(10.0, 5.0), run(12.0, 5.0)], [run(8.0, 5.0), run(9.0, 5.0)])
    local = next(line for line in lines if "in-process" in line and "→" in line)  # the CPU line comes first
    assert "10.0 → 8.0, 12.0 → 9.0" in local
    assert local.endswith("0.78 (0.75–0.80)")  # this ÷ baseline: the median and the range of the pairs


def test_the_scale_out_fit_recovers_the_units_its_runs_were_made_of():
    w, c, p = 10.0, 1.2, 400.0
    runs = [Run(1, w, 0.0, 90_000)] + [Run(n, w + crossing(n) * c + frames * p, frames, 80_000)
                                       for n, frames in ((2, 0.008), (3, 0.020), (4, 0.050), (2, 0.010))]
    assert fit(runs) == pytest.approx((w, c, p))
    with pytest.raises(ValueError, match="at least two worker counts"):
        fit([Run(1, w, 0.0, 1.0), Run(2, 15.0, 0.008, 1.0)])


def test_the_prediction_charges_each_worker_the_frames_of_its_links():
    w, c, p, per_link = 11.0, 0.95, 594.0, 250.0
    assert predict(1, w, c, p, per_link) == pytest.approx(1e6 / w)
    # 3 links' frames (0.45 of the core) leave the rest to the trees
    assert predict(4, w, c, p, per_link) == pytest.approx((1e6 - 3 * per_link * p) / (w + 6 * c) * 4)
    assert predict(8, w, c, p, per_link) == 0  # frames alone would take the core
    assert predict(8, w, c, p, per_link, fuller=True) == pytest.approx((1e6 - per_link * p) / (w + 7 * c) * 8)
    assert Run(4, 40.0, 0.05, 48_000).per_link == pytest.approx(0.05 * 48_000 / 12)


def test_the_codec_bench_runs_against_the_decoder_as_it_checks_frames(monkeypatch, capsys) -> None:
    """Its acker frames held roots that other ackers track, which the decoder refuses: the bench failed, and
    nothing ran it."""
    monkeypatch.setattr(sys, "argv", ["codec.py", "--tuples", "8", "--repeat", "1"])
    codec_bench.main()
    out = capsys.readouterr().out
    assert "8 word tuples a frame" in out and "acker frames of 8 messages: decoding and applying" in out


def test_the_api_floor_runs_every_call_of_the_bench_user_code() -> None:
    """The floor is the least any engine of Storm's API could cost for this user code only if it makes
    every call an engine makes: each tree's sentence, its split, and every word's count and ack."""
    run, spout, split, count, collector = floor_components()
    run(spout, split, count, collector, 5)
    assert spout.n == 5
    assert sum(count.counts.values()) == 5 * WORDS
    assert set(count.counts) <= set(VOCABULARY)
    assert collector.emitted == []  # the count emits nothing: every tuple emitted was executed
