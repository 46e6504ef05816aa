"""``squall top``'s rates from two scrapes of several processes, one of which missed a scrape, restarted,
or switched plans in between (the scrapes' texts are written here; tests/procs/test_top.py runs it against
real processes)."""

from __future__ import annotations

from squall.cli.top import Snapshot, frame


def metrics(acked: float, *, started: float = 100.0, plan: str = "p1") -> str:
    return (f'squall_process_info{{topology="t",role="worker",index="0",plan="{plan}"}} 1\n'
            f"process_start_time_seconds {started}\n"
            f'squall_max_spout_pending{{topology="t",component="words",task="1"}} 1000\n'
            f'squall_acked_total{{topology="t",component="words",task="1",stream="default"}} {acked}\n')


def snapshot(at: float, **texts: str) -> Snapshot:
    snap = Snapshot(at=at)
    for url, text in texts.items():
        snap.add(url, text)
    return snap


def acked_per_second(prev: Snapshot, cur: Snapshot) -> float:
    header = frame(prev, cur, expected=2).splitlines()[0]
    return float(header.split("trees acked ")[1].split("/s")[0].replace(",", ""))


def test_a_rate_counts_the_processes_that_answered_both_scrapes_and_a_restart_from_zero():
    # both answered: 10 + 20 a second
    assert acked_per_second(snapshot(0, a=metrics(1000), b=metrics(5000)),
                            snapshot(1, a=metrics(1010), b=metrics(5020))) == 30.0
    # b missed the first scrape: its lifetime count is no rate (it showed 5,020/s before)
    assert acked_per_second(snapshot(0, a=metrics(1000)), snapshot(1, a=metrics(1010), b=metrics(5020))) == 10.0
    # b restarted, or switched plans, in between: it counted 7 since (the sum went down, and showed 0/s)
    for restarted in (metrics(7, started=200.0), metrics(7, plan="p2")):
        assert acked_per_second(snapshot(0, a=metrics(1000), b=metrics(5000)),
                                snapshot(1, a=metrics(1010), b=restarted)) == 17.0


def test_the_header_says_what_processes_do_that_are_not_processing():
    """Processes that wait for peers, drain or rebalance show beside the count; all active, nothing."""
    def state(name: str) -> str:
        return (f'squall_process_state{{topology="t",state="{name}"}} 1\n'
                'squall_process_state{topology="t",state="draining"} 0\n')

    prev = snapshot(0, a=metrics(0))
    active = snapshot(1, a=metrics(10) + state("active"), b=metrics(10) + state("active"))
    assert "processes 2/2   trees" in frame(prev, active, expected=2)
    mixed = snapshot(1, a=metrics(10) + state("active"), b=metrics(10) + state("waiting_for_peers"))
    assert "processes 2/2 (1 active, 1 waiting_for_peers)   trees" in frame(prev, mixed, expected=2)


def test_the_p99_of_the_complete_latency_is_over_the_interval_interpolated_in_its_bucket():
    from squall.cli.top import p99_ms

    def latency(under_1ms: float, under_10ms: float, *, started: float = 100.0) -> str:
        labels = 'topology="t",component="words",task="1",stream="default"'
        return (metrics(under_10ms, started=started)
                + f'squall_complete_latency_seconds_bucket{{{labels},le="0.001"}} {under_1ms}\n'
                f'squall_complete_latency_seconds_bucket{{{labels},le="0.01"}} {under_10ms}\n'
                f'squall_complete_latency_seconds_bucket{{{labels},le="+Inf"}} {under_10ms}\n')

    # over the interval: 100 trees, 50 under 1 ms, the other 50 between 1 and 10 ms: the 99th is the 49th of
    # those 50, 98 % of the way through the bucket (the 1,000 trees before do not count)
    before, after = snapshot(0, a=latency(1000, 1000)), snapshot(1, a=latency(1050, 1100))
    assert abs(p99_ms(after, before) - (1 + 9 * 49 / 50)) < 1e-9
    assert p99_ms(after, after) is None  # no tree completed
    # a process that restarted counts from 0: all of its trees
    restarted = snapshot(1, a=latency(0, 100, started=200.0))
    assert abs(p99_ms(restarted, before) - (1 + 9 * 99 / 100)) < 1e-9
