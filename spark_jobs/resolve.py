"""Resolve what a dead exactly-once write left open: roll back every open transaction of its
producer group on the brokers of the topic (Spark committed none of them: a driver that commits
does not leave any open).

    python -m spark_jobs.resolve --url http://127.0.0.1:8080 --topic orders --producer-group nightly-orders

A batch write's producer group is its ``producerGroup`` option (give one to a job you may have to
resolve), else ``spark-<write id>`` with a write id made anew by each run; a streaming query resolves its own when it restarts from its checkpoint and needs
no command. Without either, the broker rolls the transactions back after
WHARF_TRANSACTION_CHECK_MAX checks.
"""

from __future__ import annotations

import argparse
import os
import sys

from spark_jobs.exactly_once import resolve
from spark_jobs.options import WriteOptions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.resolve", description=__doc__)
    parser.add_argument("--url", required=True, help="broker address, or several separated by commas")
    parser.add_argument("--topic", required=True, help="the topic the write wrote to")
    parser.add_argument("--producer-group", required=True, help="the write's producer group")
    parser.add_argument(
        "--user", default=os.environ.get("WHARF_USER"), help="accessKey:secretKey (default: $WHARF_USER)"
    )
    args = parser.parse_args(argv)
    options = WriteOptions.parse(
        {"url": args.url, "topic": args.topic, "user": args.user or "", "producerGroup": args.producer_group}
    )
    rolled_back = resolve(options, args.producer_group)
    print(f"rolled back {rolled_back} open transactions of producer group {args.producer_group!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
