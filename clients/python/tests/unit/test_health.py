"""Ejection and return of endpoints, driven by a fake clock."""

import threading
import time

from fakes import FakeClock

from ferrobay_s3 import EndpointPool, HealthConfig
from ferrobay_s3.health import HealthChecker

A, B, C = "http://a:1", "http://b:1", "http://c:1"
CFG = HealthConfig(eject_base_s=1.0, eject_max_s=8.0, probe_interval_s=0.5)


def status(pool, url):
    return next(s for s in pool.status() if s.url == url)


def test_a_failure_ejects_until_a_probe_answers():
    clock = FakeClock()
    pool = EndpointPool([A, B, C], CFG, clock)
    pool.report_failure(B, "connection refused")
    assert pool.healthy() == [A, C]
    # Ejected endpoints are tried last, after every healthy one.
    for key in ("k1", "k2", "k3", "k4"):
        assert pool.ranked("bkt", key)[-1] == B
    # Not probed while the ejection lasts...
    clock.advance(0.9)
    assert B not in pool.due_probes()
    # ...then probed; the ejection time being over is not enough to return.
    clock.advance(0.2)
    assert B in pool.due_probes()
    assert B not in pool.healthy()
    pool.probe_ok(B)
    assert pool.healthy() == [A, B, C]
    s = status(pool, B)
    assert (s.ejections, s.returns, s.failures) == (1, 1, 1)


def test_failed_probes_double_the_ejection_up_to_the_cap():
    clock = FakeClock()
    pool = EndpointPool([A, B], CFG, clock)
    pool.report_failure(A, "reset")
    waits = []
    for _ in range(6):
        left = status(pool, A).ejected_for_s
        waits.append(left)
        clock.advance(left)
        assert A in pool.due_probes()
        pool.probe_failed(A, "refused")
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert status(pool, A).ejections == 1  # one ejection, extended


def test_failures_of_requests_in_flight_do_not_lengthen_the_ejection():
    clock = FakeClock()
    pool = EndpointPool([A, B], CFG, clock)
    for _ in range(10):  # ten requests were in flight when it died
        pool.report_failure(A, "reset")
    s = status(pool, A)
    assert (s.ejected_for_s, s.strikes, s.failures, s.ejections) == (1.0, 1, 10, 1)


def test_a_successful_request_resets_the_backoff():
    clock = FakeClock()
    pool = EndpointPool([A, B], CFG, clock)
    pool.report_failure(A, "x")
    clock.advance(1.0)
    pool.probe_failed(A, "x")  # strike 2
    clock.advance(2.0)
    pool.probe_ok(A)
    pool.report_failure(A, "x")  # strike 3 without a success in between
    assert status(pool, A).ejected_for_s == 4.0
    clock.advance(4.0)
    pool.probe_ok(A)
    pool.report_success(A)
    pool.report_failure(A, "x")
    assert status(pool, A).ejected_for_s == 1.0


def test_healthy_endpoints_are_probed_every_interval_and_ejected_when_a_probe_fails():
    clock = FakeClock()
    pool = EndpointPool([A, B], CFG, clock)
    assert sorted(pool.due_probes()) == [A, B]
    assert pool.due_probes() == []
    clock.advance(0.5)
    assert sorted(pool.due_probes()) == [A, B]
    pool.probe_failed(A, "refused")
    assert pool.healthy() == [B]


def test_without_probing_an_endpoint_returns_when_its_ejection_is_over():
    clock = FakeClock()
    pool = EndpointPool([A, B], CFG, clock, probing=False)
    pool.report_failure(A, "x")
    clock.advance(0.99)
    assert pool.healthy() == [B]
    clock.advance(0.01)
    assert pool.healthy() == [A, B]


def test_all_ejected_still_ranks_every_endpoint():
    pool = EndpointPool([A, B, C], CFG, FakeClock())
    for e in (A, B, C):
        pool.report_failure(e, "x")
    assert pool.healthy() == []
    assert sorted(pool.ranked("b", "k")) == [A, B, C]


def test_set_endpoints_keeps_health_of_known_ones():
    clock = FakeClock()
    pool = EndpointPool([A, B], CFG, clock)
    pool.report_failure(A, "x")
    pool.set_endpoints([A, C])
    assert pool.endpoints() == [A, C]
    assert pool.healthy() == [C]


def test_checker_round_probes_due_endpoints_and_refreshes_the_list():
    clock = FakeClock()
    cfg = HealthConfig(eject_base_s=1.0, probe_interval_s=0.5, refresh_interval_s=10)
    pool = EndpointPool([A, B], cfg, clock)
    down = {A}
    probed = []

    def probe(url):
        probed.append(url)
        if url in down:
            raise ConnectionRefusedError("refused")

    listing = [[A, B]]
    checker = HealthChecker(pool, probe, cfg, refresh=lambda: listing[0], clock=clock)
    checker.run_once()
    assert sorted(probed) == [A, B] and pool.healthy() == [B]
    down.clear()
    clock.advance(1.0)
    checker.run_once()
    assert pool.healthy() == [A, B]
    listing[0] = [B, C]
    clock.advance(10)
    checker.run_once()
    assert pool.endpoints() == [B, C]
    # A broken source keeps the last list.
    listing[0] = None  # type: ignore[assignment]

    def broken():
        raise OSError("cluster API down")

    checker2 = HealthChecker(pool, probe, cfg, refresh=broken, clock=clock)
    clock.advance(10)
    checker2.run_once()
    assert pool.endpoints() == [B, C]


def test_background_thread_returns_an_endpoint_once_it_answers():
    cfg = HealthConfig(eject_base_s=0.05, eject_max_s=0.1, probe_interval_s=0.05)
    pool = EndpointPool([A, B], cfg)
    up = threading.Event()

    def probe(url):
        if url == A and not up.is_set():
            raise ConnectionRefusedError("refused")

    checker = HealthChecker(pool, probe, cfg)
    checker.start()
    try:
        pool.report_failure(A, "reset")
        time.sleep(0.5)
        assert pool.healthy() == [B]
        up.set()
        deadline = time.monotonic() + 5
        while A not in pool.healthy():
            assert time.monotonic() < deadline, pool.status()
            time.sleep(0.01)
    finally:
        checker.close()


def test_concurrent_reports_keep_exact_counts():
    pool = EndpointPool([A, B, C], CFG, FakeClock())
    per_thread = 2000

    def work(i):
        for n in range(per_thread):
            e = (A, B, C)[(i + n) % 3]
            if n % 7 == 0:
                pool.report_failure(e, "x")
            else:
                pool.report_success(e)
            pool.ranked("b", str(n))
            if n % 11 == 0:
                pool.probe_ok(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = pool.status()
    assert sum(s.requests for s in st) == 8 * per_thread
    assert sum(s.failures for s in st) == 8 * len(range(0, per_thread, 7))
