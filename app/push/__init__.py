"""Push subscriptions (docs/guides/push.md): consumer groups the broker runs itself, each
delivering the messages of its topic by HTTP POST to an endpoint.

* :mod:`app.push.subscription` - a subscription's settings, checked (the value PUT and kept);
* :mod:`app.push.registry` - the subscriptions kept in ``config/pushSubscriptions.json``;
* :mod:`app.push.endpoint` - which endpoints may be pushed to (schemes, private addresses);
* :mod:`app.push.signing` - Standard Webhooks signatures;
* :mod:`app.push.request` - a delivery's request (body, headers) and the endpoint's answer;
* :mod:`app.push.pusher` - one subscription's delivery loops over its queues;
* :mod:`app.push.service` - every subscription's pusher, started and stopped with the broker.

The pusher uses the broker's public operations (reads, held reads, offsets, send-back) and reaches
endpoints through a :class:`app.push.request.PushTransport` it is handed; nothing here imports an
HTTP library (:class:`app.outbound.http.HttpPushTransport` is the one the app wires).
"""
