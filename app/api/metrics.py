"""``GET /metrics``: the broker's metrics in Prometheus' text format, and the HTTP request histogram.

Each app has its own registry (tests run several apps in one process) holding two collectors: the
broker's gauges and flush histogram (:class:`~app.broker.metrics.BrokerCollector`) and this
module's ``wharf_http_request_duration_seconds{method,route,status}``, timed by a pure ASGI
middleware around the whole app. ``route`` is the matched route's path template
(``/v1/topics/{topic}/messages``), never the raw path; a request no route matches is
``<unmatched>``. A WebSocket is not an HTTP request and is not timed. After the registry's families
come the broker's counters and lag, written by :mod:`app.broker.metrics_text`.

A scrape writes the text in a worker thread: the lag of 10,000 queues takes a while, and the event
loop (produce, pull) goes on meanwhile. Nothing it reads takes the store's write lock. The route
is not in the OpenAPI document: it answers Prometheus' format, not the JSON API (docs/guides/operating/metrics.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from time import perf_counter

from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import iter_route_contexts
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.broker.metrics import DURATION_BUCKETS_S, BrokerCollector, BrokerMetrics, DurationHistogram
from app.broker.metrics_text import broker_series
from app.push.metrics import PushCollector
from app.store import MessageStore

router = APIRouter()

# Version 0.0.4 of the text format: the one every Prometheus server reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED = "<unmatched>"
# Any other method is counted as "OTHER": the label stays bounded whatever a client sends.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A produce takes about a millisecond; a long poll waits up to WHARF_MAX_WAIT_MS (30 s by default).
HTTP_BUCKETS_S = (*DURATION_BUCKETS_S, 30.0, 60.0)

SeriesKey = tuple[str, str, int]  # method, route template, status


class HttpDurations(Collector):
    """``wharf_http_request_duration_seconds``: one histogram per (method, route, status), written on
    the event loop, read by a scrape in another thread."""

    def __init__(self) -> None:
        self.series: dict[SeriesKey, DurationHistogram] = {}
        self.fast_lane_requests = 0  # of those, answered by app.api.fast_lane
        self.lane_cycle_requests = 0  # of those, on the connection (app.api.lane_cycle)
        self.lane_answered_now = 0  # of those, answered without waiting (LaneCycle.run_now)

    def observe(self, key: SeriesKey, seconds: float) -> None:
        histogram = self.series.get(key)
        if histogram is None:
            histogram = self.series[key] = DurationHistogram(HTTP_BUCKETS_S)
        histogram.observe(seconds)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "wharf_http_request_duration_seconds",
            "HTTP requests by method, route template and status, from the request to the last byte answered",
            labels=["method", "route", "status"],
        )
        for (method, route, status), histogram in sorted(list(self.series.items())):
            histogram.add_to(family, (method, route, str(status)))
        yield family
        yield CounterMetricFamily(
            "wharf_http_fast_lane_requests",
            "HTTP requests answered by the fast lane (produce and pull of the common shapes)",
            value=self.fast_lane_requests,
        )
        yield CounterMetricFamily(
            "wharf_http_fast_lane_connection_requests",
            "Of the fast lane's requests, those served on the connection, below uvicorn's request cycle",
            value=self.lane_cycle_requests,
        )
        yield CounterMetricFamily(
            "wharf_http_fast_lane_answered_at_once",
            "Of the requests served on the connection, produces answered without waiting: stored in "
            "one compiled call under a flush and a replication mode that acknowledge at once",
            value=self.lane_answered_now,
        )


class StatusNote:
    """The ``send`` the app gets: notes the answer's status and passes every message on. A plain
    callable returning ``send``'s awaitable: no coroutine of its own per message."""

    __slots__ = ("send", "status")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 500  # unless an answer starts: the app failed

    def __call__(self, message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        return self.send(message)


class HttpMetricsMiddleware:
    """Times every HTTP request, labelled with the template of the route that answered it.

    FastAPI's routes leave themselves in ``scope["route"]``; a plain Starlette route (produce's)
    leaves only its endpoint, whose template a table built at the first request gives. A request
    answered before routing (by the ACL, the edge's limits) is matched against the routes here.
    """

    def __init__(self, app: ASGIApp, durations: HttpDurations, routes: list[BaseRoute]) -> None:
        self.app = app
        self.durations = durations
        self.routes = routes
        self._templates: dict[object, str] | None = None  # endpoint -> template

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = perf_counter()
        noted = StatusNote(send)
        try:
            await self.app(scope, receive, noted)
        finally:
            elapsed = perf_counter() - started
            method = scope["method"]
            route = scope.get("route")  # the router writes on the scope every middleware passes on
            template = route.path if route is not None else self._template(scope)
            self.durations.observe(
                (method if method in METHODS else "OTHER", template, noted.status), elapsed
            )

    def _template(self, scope: Scope) -> str:
        templates = self._templates
        if templates is None:  # every route exists once the app serves
            templates = self._templates = _templates_by_endpoint(self.routes)
        template = templates.get(scope.get("endpoint"))
        return template if template is not None else _matched_template(self.routes, scope)


def _templates_by_endpoint(routes: list[BaseRoute]) -> dict[object, str]:
    """Endpoint -> template, through the routers the app included; an endpoint served at two
    templates is left out (it is matched instead)."""
    templates: dict[object, str] = {}
    shared: set[object] = set()
    for context in iter_route_contexts(routes):
        endpoint, path = context.endpoint, context.path
        if endpoint is not None and path is not None and templates.setdefault(endpoint, path) != path:
            shared.add(endpoint)
    return {endpoint: path for endpoint, path in templates.items() if endpoint not in shared}


def _matched_template(routes: list[BaseRoute], scope: Scope) -> str:
    """The template the router would match for ``scope``, or :data:`UNMATCHED`; it walks every
    route, so only requests that reached no endpoint come here."""
    partial = UNMATCHED
    for context in iter_route_contexts(routes):
        match, _ = context.matches(scope)
        if match is Match.FULL:
            return str(context.path)
        if match is Match.PARTIAL and partial == UNMATCHED:
            partial = str(context.path)  # another method of the same path
    return partial


class Exposition:
    """What ``GET /metrics`` answers: the registry's families, written by prometheus_client, then
    the broker's families of a series per topic, group or queue (:mod:`app.broker.metrics_text`)."""

    def __init__(
        self, registry: CollectorRegistry, metrics: BrokerMetrics, store_of: Callable[[], MessageStore | None]
    ) -> None:
        self.registry = registry
        self.metrics = metrics
        self.store_of = store_of

    def render(self) -> bytes:
        return generate_latest(self.registry) + broker_series(self.metrics, self.store_of()).encode()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """This broker's metrics in the Prometheus text format."""
    exposition: Exposition = request.app.state.metrics
    return Response(await asyncio.to_thread(exposition.render), media_type=CONTENT_TYPE)


def install_metrics(app: FastAPI) -> BrokerMetrics:
    """Give ``app`` its registry, the HTTP middleware (outermost: refusals are timed too) and
    ``GET /metrics``; returns the broker's metrics for the broker and the store to write."""
    broker_metrics = BrokerMetrics()
    durations = HttpDurations()

    def store_of() -> MessageStore | None:
        broker = app.state.broker
        return broker.store if broker is not None and broker.store.is_open else None

    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker_metrics, store_of))
    registry.register(durations)
    registry.register(PushCollector(lambda: getattr(app.state, "push", None)))
    app.state.metrics = Exposition(registry, broker_metrics, store_of)
    app.state.http_durations = durations
    app.add_middleware(HttpMetricsMiddleware, durations=durations, routes=app.router.routes)
    app.include_router(router)
    return broker_metrics
