"""What the Wharf source itself refuses. A broker's refusal or silence reaches Spark as the client's
own error (wharf_client: BrokerError with the broker's error_code, BrokerUnavailableError).

Exceptions::

    WharfSourceError            anything the source cannot do; the message says what and where
    ├── OptionError             an option is missing or malformed (spark_jobs.options)
    └── DataLossError           offsets a read was planned for are gone (retention), failOnDataLoss
"""


class WharfSourceError(Exception):
    """A read or write through the Wharf source failed."""


class DataLossError(WharfSourceError):
    """Messages a read was planned for are no longer stored (retention deleted them)."""
