"""The broker core's outbound adapter: its calls to other processes (a slave's master, the other
brokers of a cluster, producers' check endpoints) over HTTP and WebSocket. The core declares what it
needs (app.broker.outbound) and is handed an :class:`~app.outbound.http.HttpOutbound` at construction."""

from app.outbound.http import HttpOutbound, HttpPushTransport

__all__ = ["HttpOutbound", "HttpPushTransport"]
