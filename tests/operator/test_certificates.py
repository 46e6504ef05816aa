"""A Topology's TLS credentials are renewed when a third to a quarter of their validity is left, and the pods are
commanded with those they hold until the new ones replace them (real certificates throughout)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.transport.tls import VALID_DAYS, Credentials, issue
from squall_operator.certificates import Certificates, draw, renewal_due

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
KEY = ("prod", "wc", "uid-1")


def issued_days_ago(days: float) -> Credentials:
    return issue("wc", now=NOW - timedelta(days=days))


def test_validity_is_where_both_the_ca_and_the_certificate_hold():
    since, until = issued_days_ago(10).validity()
    assert since == NOW - timedelta(days=10, minutes=5)  # clocks a little behind are tolerated
    assert until == NOW - timedelta(days=10) + timedelta(days=VALID_DAYS)


@pytest.mark.parametrize(("age", "point", "due"), [(0, 0.0, False), (240, 0.0, False), (246, 0.0, True),
                                                    (246, 0.99, False), (270, 0.99, False), (276, 0.99, True),
                                                    (364, 0.5, True), (400, 0.0, True)])
def test_renewal_is_due_when_a_third_to_a_quarter_of_the_validity_is_left(age, point, due):
    # a year and 5 minutes of validity: a third of it is left after 243.3 days, a quarter after 273.8
    assert renewal_due(issued_days_ago(age), NOW, point) is due


def test_topologies_made_together_renew_apart():
    points = [draw(f"uid-{i}") for i in range(200)]
    assert all(0 <= p < 1 for p in points) and draw("uid-1") == draw("uid-1")
    assert min(points) < 0.1 and max(points) > 0.9  # spread over the window, not bunched


def test_valid_credentials_are_kept_as_they_are():
    current = issued_days_ago(100)
    held = Certificates().of(KEY, current, NOW)
    assert held.held == held.rendered == current and held.issued is None


def test_a_new_topology_gets_new_credentials_without_an_event():
    held = Certificates().of(KEY, None, NOW)
    assert held.held is None and held.rendered.validity()[1] > NOW + timedelta(days=300) and held.issued is None


def test_due_credentials_are_replaced_by_the_same_new_ones_until_the_secret_holds_them():
    certificates, old = Certificates(), issued_days_ago(300)
    first = certificates.of(KEY, old, NOW)
    assert first.held == old and first.rendered != old and first.rendered.ca != old.ca
    assert "expires at" in first.issued and "as the Topology's upgradeStrategy says" in first.issued
    # a drain takes several reconciles: the pods' template must not change under it, nor the Event repeat
    again = certificates.of(KEY, old, NOW + timedelta(seconds=5))
    assert again.rendered == first.rendered and again.held == old and again.issued is None
    written = certificates.of(KEY, first.rendered, NOW + timedelta(seconds=10))
    assert written.held == written.rendered == first.rendered and written.issued is None


def test_written_credentials_are_held_and_a_later_deletion_issues_others():
    certificates = Certificates()
    first = certificates.of(KEY, None, NOW).rendered
    certificates.written(KEY, first)
    # deleted before a reconcile read the Secret back: a rotation, so not the same ones again
    again = certificates.of(KEY, None, NOW)
    assert again.held == first and again.rendered.ca != first.ca and "Secret is gone" in again.issued


def test_a_deleted_secret_is_replaced_and_the_pods_are_still_commanded_with_what_they_hold():
    certificates, current = Certificates(), issued_days_ago(10)
    certificates.of(KEY, current, NOW)
    gone = certificates.of(KEY, None, NOW)
    assert gone.held == current and gone.rendered.ca != current.ca and "Secret is gone" in gone.issued
    certificates.forget("prod", "wc")
    assert certificates.of(KEY, None, NOW).held is None  # a deleted Topology's are forgotten
    # one deleted and made again under the same name is another Topology: nothing of the old one's is held
    assert certificates.of(("prod", "wc", "uid-2"), None, NOW).held is None


def test_a_secret_that_holds_no_certificates_is_replaced():
    certificates = Certificates()
    held = certificates.of(KEY, Credentials(ca=b"not", cert=b"a", key=b"certificate"), NOW)
    assert held.held is None and held.rendered.validity()[1] > NOW
    assert held.issued.startswith("the topology's TLS Secret holds no certificate that can be read")
