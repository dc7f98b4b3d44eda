"""The proxy's Prometheus metrics (prometheus-client, a registry of its own), served at `/metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kit.record.alarms import KINDS

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Calls by cache state, alarms by kind, upstream latency, and calls the upstream failed."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter("kit_watch_calls", "generation calls seen, by the cache state that served them",
                             ["state"], registry=self.registry)
        self.alarms = Counter("kit_watch_alarms", "alarms raised, by kind (kit.record.alarms)", ["kind"],
                              registry=self.registry)
        self.passed = Counter("kit_watch_passed_through", "other calls passed through unrecorded",
                              registry=self.registry)
        self.failures = Counter("kit_watch_upstream_failures", "calls the upstream did not answer whole",
                                registry=self.registry)
        self.latency = Histogram("kit_watch_upstream_seconds", "seconds from the request to the upstream's last byte",
                                 registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        for kind in KINDS:
            self.alarms.labels(kind)  # every kind exported from the start, at 0

    def seen(self, state: str | None, seconds: float, alarms: list[str], failed: bool) -> None:
        self.calls.labels(state or "unknown").inc()
        self.latency.observe(seconds)
        for kind in alarms:
            self.alarms.labels(kind).inc()
        if failed:
            self.failures.inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
