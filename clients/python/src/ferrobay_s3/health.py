"""Which gateway endpoints are healthy: passive ejection on failures, active probes that
return them, and the background thread that runs the probes and re-reads the endpoint
source. Thread-safe; time comes from an injectable clock (tests use a fake one)."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set

from .config import HealthConfig
from .hashing import rank

log = logging.getLogger("ferrobay_s3")

Clock = Callable[[], float]


@dataclass(frozen=True)
class EndpointStatus:
    """A snapshot of one endpoint, as :meth:`Client.endpoint_status` reports it."""

    url: str
    healthy: bool
    #: Seconds until the endpoint may be probed again (0 when healthy or due).
    ejected_for_s: float
    #: Ejections in a row without a successful request in between (sets the backoff).
    strikes: int
    requests: int
    failures: int
    ejections: int
    returns: int
    last_error: Optional[str]


class _State:
    __slots__ = (
        "url", "ejected_until", "strikes", "requests", "failures", "ejections",
        "returns", "last_error", "next_probe",
    )

    def __init__(self, url: str) -> None:
        self.url = url
        self.ejected_until: Optional[float] = None
        self.strikes = 0
        self.requests = 0
        self.failures = 0
        self.ejections = 0
        self.returns = 0
        self.last_error: Optional[str] = None
        self.next_probe = 0.0


class EndpointPool:
    """The endpoints and their health.

    An endpoint is *ejected* by :meth:`report_failure` (a request failed on it: connection
    error or 5xx) or :meth:`probe_failed`, for ``eject_base_s`` × 2^(strikes − 1) seconds
    (at most ``eject_max_s``), where strikes counts ejections since the last successful
    request. Failures of other requests while it is ejected (requests already in flight
    when it died) do not lengthen the ejection. It returns through :meth:`probe_ok` once
    its ejection time is over; with ``probing=False`` it returns by itself then.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        config: HealthConfig = HealthConfig(),
        clock: Clock = time.monotonic,
        probing: bool = True,
    ) -> None:
        self._config = config
        self._clock = clock
        self._probing = probing
        self._lock = threading.Lock()
        self._states: Dict[str, _State] = {}
        self.set_endpoints(endpoints)

    # -- membership -------------------------------------------------------------------

    def set_endpoints(self, urls: Iterable[str]) -> None:
        """Replaces the endpoint list; endpoints already known keep their health."""
        wanted = list(dict.fromkeys(urls))
        with self._lock:
            old = self._states
            self._states = {u: old.get(u) or _State(u) for u in wanted}
        added = [u for u in wanted if u not in old]
        removed = [u for u in old if u not in self._states]
        if old and (added or removed):
            log.info("gateway endpoints: added %s, removed %s", added, removed)

    def endpoints(self) -> List[str]:
        with self._lock:
            return list(self._states)

    # -- routing ------------------------------------------------------------------------

    def _is_healthy(self, s: _State, now: float) -> bool:
        if s.ejected_until is None:
            return True
        if not self._probing and s.ejected_until <= now:
            s.ejected_until = None
            s.returns += 1
            log.info("gateway %s returns (ejection over)", s.url)
            return True
        return False

    def healthy(self) -> List[str]:
        now = self._clock()
        with self._lock:
            return [u for u, s in self._states.items() if self._is_healthy(s, now)]

    def ranked(self, bucket: str, key: str) -> List[str]:
        """Every endpoint in the order a request for ``(bucket, key)`` tries them: the
        healthy ones by rendezvous score, then the ejected ones (last resort) the same
        way."""
        now = self._clock()
        with self._lock:
            healthy: List[str] = []
            ejected: List[str] = []
            for u, s in self._states.items():
                (healthy if self._is_healthy(s, now) else ejected).append(u)
        return rank(healthy, bucket, key) + rank(ejected, bucket, key)

    # -- passive health -----------------------------------------------------------------

    def report_success(self, url: str) -> None:
        with self._lock:
            s = self._states.get(url)
            if s is None:
                return
            s.requests += 1
            if s.ejected_until is None:
                s.strikes = 0

    def report_answer(self, url: str) -> None:
        """The gateway answered with a definitive S3 error (4xx): it is alive, but the
        answer says nothing about its ejection history."""
        with self._lock:
            s = self._states.get(url)
            if s is not None:
                s.requests += 1

    def report_failure(self, url: str, reason: str) -> None:
        now = self._clock()
        with self._lock:
            s = self._states.get(url)
            if s is None:
                return
            s.requests += 1
            s.failures += 1
            s.last_error = reason
            if s.ejected_until is None:
                self._eject(s, now, reason)

    def _eject(self, s: _State, now: float, reason: str) -> None:
        s.strikes += 1
        backoff = min(
            self._config.eject_max_s, self._config.eject_base_s * 2 ** (s.strikes - 1)
        )
        if s.ejected_until is None:
            s.ejections += 1
            log.warning("gateway %s ejected for %.1f s: %s", s.url, backoff, reason)
        s.ejected_until = now + backoff
        s.next_probe = s.ejected_until

    # -- active health ------------------------------------------------------------------

    def due_probes(self) -> List[str]:
        """Endpoints to probe now: healthy ones every ``probe_interval_s``, ejected ones
        once their ejection time is over. Marks them probed (the next one is due an
        interval later)."""
        now = self._clock()
        due = []
        with self._lock:
            for s in self._states.values():
                if s.next_probe <= now and (s.ejected_until is None or s.ejected_until <= now):
                    due.append(s.url)
                    s.next_probe = now + self._config.probe_interval_s
        return due

    def probe_ok(self, url: str) -> None:
        with self._lock:
            s = self._states.get(url)
            if s is not None and s.ejected_until is not None:
                s.ejected_until = None
                s.next_probe = self._clock() + self._config.probe_interval_s
                s.returns += 1
                log.info("gateway %s returns (probe answered)", url)

    def probe_failed(self, url: str, reason: str) -> None:
        now = self._clock()
        with self._lock:
            s = self._states.get(url)
            if s is None:
                return
            s.last_error = reason
            self._eject(s, now, f"probe: {reason}")

    # -- reporting ----------------------------------------------------------------------

    def status(self) -> List[EndpointStatus]:
        now = self._clock()
        with self._lock:
            return [
                EndpointStatus(
                    url=s.url,
                    healthy=self._is_healthy(s, now),
                    ejected_for_s=max(0.0, (s.ejected_until or now) - now),
                    strikes=s.strikes,
                    requests=s.requests,
                    failures=s.failures,
                    ejections=s.ejections,
                    returns=s.returns,
                    last_error=s.last_error,
                )
                for s in self._states.values()
            ]


class HealthChecker:
    """The background side of an :class:`EndpointPool`: one thread that, every tick,
    starts the due probes on a bounded pool of ``probe_workers`` threads (an endpoint
    never has two probes in flight) and re-reads the endpoint source every
    ``refresh_interval_s``."""

    def __init__(
        self,
        pool: EndpointPool,
        probe: Callable[[str], None],
        config: HealthConfig,
        refresh: Optional[Callable[[], List[str]]] = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._pool = pool
        self._probe = probe
        self._config = config
        self._refresh = refresh
        self._clock = clock
        self._next_refresh = clock() + config.refresh_interval_s
        self._inflight: Set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._executor: Optional[ThreadPoolExecutor] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=self._config.probe_workers, thread_name_prefix="ferrobay-s3-probe"
        )
        self._thread = threading.Thread(
            target=self._run, name="ferrobay-s3-health", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _run(self) -> None:
        tick = min(1.0, max(0.05, self._config.probe_interval_s / 2))
        while not self._stop.wait(tick):
            try:
                self.run_once()
            except Exception:  # never let the health thread die
                log.exception("health check round failed")

    def run_once(self) -> None:
        """One round: refresh the endpoint list if due, start the due probes. Without
        :meth:`start` (tests), probes run inline in the caller's thread."""
        if self._refresh is not None and self._clock() >= self._next_refresh:
            self._next_refresh = self._clock() + self._config.refresh_interval_s
            try:
                self._pool.set_endpoints(self._refresh())
            except Exception as e:  # keep the last known list
                log.warning("gateway endpoint list not refreshed: %s", e)
        if self._config.probe_interval_s <= 0:
            return
        for url in self._pool.due_probes():
            with self._lock:
                if url in self._inflight:
                    continue
                self._inflight.add(url)
            if self._executor is None:
                self._probe_one(url)
            else:
                self._executor.submit(self._probe_one, url)

    def _probe_one(self, url: str) -> None:
        try:
            self._probe(url)
        except Exception as e:
            self._pool.probe_failed(url, _one_line(e))
        else:
            self._pool.probe_ok(url)
        finally:
            with self._lock:
                self._inflight.discard(url)


def _one_line(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text.splitlines()[0] if text else type(e).__name__
