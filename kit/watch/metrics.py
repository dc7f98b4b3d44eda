"""The proxy's Prometheus metrics (prometheus-client, a registry of its own), served at `/metrics`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from kit.record.alarms import KINDS, Tracker

CONTENT_TYPE = CONTENT_TYPE_LATEST
# why the proxy answered a request itself, without forwarding it (all exported from the start, at 0)
REFUSALS = ("body_too_large", "not_utf8", "unsendable", "header_too_large", "header_timeout", "body_timeout")


class _Held(Collector):
    """What the proxy holds now, read when scraped (nothing per call): requests in flight, and the alarm
    tracker's requests against its cap, with the count it has forgotten."""

    def __init__(self, tracker: Tracker, in_flight: Callable[[], int]):
        self.tracker, self.in_flight = tracker, in_flight

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kit_watch_in_flight", "requests forwarded and not yet answered whole",
                                value=self.in_flight())
        yield GaugeMetricFamily("kit_watch_alarm_requests", "requests the alarm tracker remembers",
                                value=len(self.tracker.seen))
        if self.tracker.cap is not None:
            yield GaugeMetricFamily("kit_watch_alarm_requests_cap", "the most requests the alarm tracker remembers "
                                    "(--alarm-requests)", value=self.tracker.cap)
        yield CounterMetricFamily("kit_watch_alarm_requests_forgotten", "requests the alarm tracker forgot, the "
                                  "least recently seen first, to stay within its cap", value=self.tracker.forgotten)


class Metrics:
    """Calls by cache state, alarms by kind, upstream latency, calls the upstream failed, requests refused, and
    what the proxy holds (in flight, the alarm tracker's size)."""

    def __init__(self, tracker: Tracker, in_flight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter("kit_watch_calls", "generation calls seen, by the cache state that served them",
                             ["state"], registry=self.registry)
        self.alarms = Counter("kit_watch_alarms", "alarms raised, by kind (kit.record.alarms)", ["kind"],
                              registry=self.registry)
        self.passed = Counter("kit_watch_passed_through", "other calls passed through unrecorded",
                              registry=self.registry)
        self.failures = Counter("kit_watch_upstream_failures", "calls the upstream did not answer whole",
                                registry=self.registry)
        self.refused = Counter("kit_watch_refused", "requests the proxy answered itself, not forwarded, by reason",
                               ["reason"], registry=self.registry)
        self.latency = Histogram("kit_watch_upstream_seconds", "seconds from the request to the upstream's last byte",
                                 registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.registry.register(_Held(tracker, in_flight))
        for kind in KINDS:
            self.alarms.labels(kind)  # every kind exported from the start, at 0
        for reason in REFUSALS:
            self.refused.labels(reason)

    def seen(self, state: str | None, seconds: float, alarms: list[str], failed: bool) -> None:
        self.calls.labels(state or "unknown").inc()
        self.latency.observe(seconds)
        for kind in alarms:
            self.alarms.labels(kind).inc()
        if failed:
            self.failures.inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
