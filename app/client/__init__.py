"""Deprecated: Wharf's Python client is the ``wharf-client`` distribution, imported as
:mod:`wharf_client`; ``app.client`` and its modules (``app.client.producer``, ...) are aliases of
``wharf_client``'s and go in the next release. Import from ``wharf_client`` instead."""

from wharf_client import *  # noqa: F403
from wharf_client import __all__ as __all__

from app.client import (  # noqa: F401 - the submodules, as attributes of this package
    admin,
    aio,
    aio_consumer,
    aio_pipeline,
    aio_producer,
    aio_subscriber,
    auth,
    blocking,
    closing,
    consumed,
    consumer,
    errors,
    fault,
    group_consumer,
    outgoing,
    producer,
    queues,
    routes,
)
