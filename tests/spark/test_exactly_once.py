"""Exactly-once writes (``deliveryGuarantee=exactly_once``, the default) with real Spark and a real
broker: retried tasks, a failed job, speculation, a streaming query SIGKILLed and restarted from
its checkpoint (also after the idempotency window), and a driver killed between the tasks' writes
and its commit, or between its commit and Spark's checkpoint. Each row is visible once, nothing is
visible before Spark commits, and nothing is left open."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from tests.api.server import BrokerProcess
from tests.spark.conftest import make_topic
from tests.spark.eo_job import HeldSource
from tests.spark.test_writer_and_jobs import pull_all
from tests.transactions.transacting import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WINDOW_S = 1  # the broker's idempotency window here: a restart can come after it


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose idempotency window is 1 s, and which checks no transaction within a test."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "store",
        idempotency_window_s=WINDOW_S,
        transaction_timeout_s=600,
    ).start()
    yield process
    process.stop()


def bodies(client: httpx.Client, topic: str) -> Counter[str]:
    return Counter(str(message["body"]) for message in pull_all(client, topic))


def open_transactions(client: httpx.Client, group: str) -> int:
    count: int = client.get(f"/v1/producers/{group}").json()["open_transactions"]
    return count


def rows(spark: SparkSession, count: int) -> DataFrame:
    return spark.range(count, numPartitions=3).selectExpr("concat('row-', id) AS body")


def write(frame: DataFrame, broker: BrokerProcess, topic: str, group: str, **options: str) -> None:
    """Through ``wharf_held`` (tests.spark.eo_job): the wharf writer, failing as ``options`` say."""
    writer = frame.write.format("wharf_held").option("url", broker.url).option("topic", topic)
    writer = writer.option("producerGroup", group).option("batchSize", "100")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


@pytest.fixture
def held(spark: SparkSession) -> Iterator[None]:
    """``wharf_held`` registered; Arrow batches of 100 rows, so a task fails between two of them."""
    spark.dataSource.register(HeldSource)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    yield
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_tasks_failing_on_their_first_attempt_write_each_row_once(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str, held: None
) -> None:
    write(rows(spark, 3000), broker, topic, "retried-tasks", failAfter="600", failPartition="-1")
    assert bodies(client, topic) == Counter(f"row-{i}" for i in range(3000))
    # The failed attempts' transactions were rolled back by the driver's commit.
    assert open_transactions(client, "retried-tasks") == 0


def test_a_failed_job_leaves_nothing_visible_and_its_rerun_writes_each_row_once(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str, held: None
) -> None:
    frame = rows(spark, 3000)
    with pytest.raises(PySparkException, match="the task fails"):
        write(frame, broker, topic, "failed-job", failAfter="500", failPartition="2")
    assert bodies(client, topic) == Counter()
    assert open_transactions(client, "failed-job") == 0  # the abort rolled back every attempt's
    write(frame, broker, topic, "failed-job")
    assert bodies(client, topic) == Counter(f"row-{i}" for i in range(3000))


def run_job(*args: str, wait: bool = True) -> subprocess.Popen[bytes]:
    """``python -m tests.spark.eo_job`` in a process group of its own (driver, JVM, workers)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.eo_job", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    if wait:
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, output.decode(errors="replace")[-5000:]
    return process


def kill_when(process: subprocess.Popen[bytes], condition: Any, what: str) -> None:
    """SIGKILL the job's whole process group once ``condition()`` holds."""
    try:
        wait_until(lambda: condition() or process.poll() is not None, timeout_s=300, what=what)
        assert process.poll() is None, f"the job ended before {what}"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_attempts_spark_does_not_commit_are_rolled_back_like_a_speculative_duplicate(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str, held: None
) -> None:
    """Every first attempt stores all of its rows, then fails: as a speculative duplicate, it holds
    a full copy of its partition that Spark does not commit."""
    write(rows(spark, 2000), broker, topic, "duplicated", failAfter="1000000", failPartition="-1")
    assert bodies(client, topic) == Counter(f"row-{i}" for i in range(2000))
    assert open_transactions(client, "duplicated") == 0


def test_a_batch_driver_killed_before_its_commit_leaves_nothing_and_the_rerun_resolves(
    broker: BrokerProcess, client: httpx.Client, topic: str, tmp_path: Path
) -> None:
    marker = tmp_path / "held"
    job = ("batch", "--url", broker.url, "--target", topic, "--rows", "2000", "--group", "nightly")
    process = run_job(*job, "--hold", "before", "--marker", str(marker), wait=False)
    kill_when(process, marker.exists, "the driver's commit")
    assert open_transactions(client, "nightly") > 0  # the tasks' writes, never committed
    assert bodies(client, topic) == Counter()
    # The rerun (same producerGroup) rolls back what the dead driver left open, then writes.
    run_job(*job)
    assert bodies(client, topic) == Counter(f"row-{i}" for i in range(2000))
    assert open_transactions(client, "nightly") == 0


def test_the_resolve_command_rolls_back_a_dead_batch_write(
    broker: BrokerProcess, client: httpx.Client, topic: str, tmp_path: Path
) -> None:
    marker = tmp_path / "held"
    job = ("batch", "--url", broker.url, "--target", topic, "--rows", "500", "--group", "dead-write")
    kill_when(
        run_job(*job, "--hold", "before", "--marker", str(marker), wait=False), marker.exists, "the commit"
    )
    assert open_transactions(client, "dead-write") > 0
    resolved = subprocess.run(
        [sys.executable, "-m", "spark_jobs.resolve", "--url", broker.url, "--topic", topic,
         "--producer-group", "dead-write"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    assert "rolled back" in resolved.stdout
    assert open_transactions(client, "dead-write") == 0
    assert bodies(client, topic) == Counter()


def source_topic(client: httpx.Client, count: int) -> str:
    source = make_topic(client, "stream-source")
    for first in range(0, count, 500):
        answer = client.post(
            f"/v1/topics/{source}/messages",
            json={"messages": [{"body": f"in-{i}"} for i in range(first, min(count, first + 500))]},
        )
        assert answer.status_code == 200, answer.text
    return source


@pytest.mark.parametrize("hold", ["before", "after"])
@pytest.mark.parametrize("after_window", [False, True])
def test_a_streaming_driver_killed_around_its_commit_and_restarted_writes_each_row_once(
    broker: BrokerProcess, client: httpx.Client, tmp_path: Path, hold: str, after_window: bool
) -> None:
    """Killed before the commit of micro-batch 1 (its transactions open: the restart adopts and
    commits them) or after it (committed, but not in Spark's checkpoint: the replay finds them
    committed and stores nothing), restarted at once or after the idempotency window."""
    source = source_topic(client, 2000)
    target = make_topic(client, "stream-target")
    marker = tmp_path / "held"
    job = (
        "stream", "--url", broker.url, "--source", source, "--target", target,
        "--checkpoint", str(tmp_path / "checkpoint"), "--per-trigger", "500",
    )  # fmt: skip
    process = run_job(*job, "--hold", hold, "--hold-batch", "1", "--marker", str(marker), wait=False)
    kill_when(process, marker.exists, f"the commit of micro-batch 1 ({hold})")
    visible = bodies(client, target)
    assert sum(visible.values()) == (1000 if hold == "after" else 500)
    assert max(visible.values()) == 1
    if after_window:
        time.sleep(WINDOW_S + 1)  # the broker's idempotency window has nothing of the first run now
    run_job(*job)
    assert bodies(client, target) == Counter(f"in-{i}" for i in range(2000))


def test_a_streaming_query_sigkilled_mid_run_and_restarted_after_the_window_writes_each_row_once(
    broker: BrokerProcess, client: httpx.Client, tmp_path: Path
) -> None:
    source = source_topic(client, 3000)
    target = make_topic(client, "stream-target")
    job = (
        "stream", "--url", broker.url, "--source", source, "--target", target,
        "--checkpoint", str(tmp_path / "checkpoint"), "--per-trigger", "300", "--batch-size", "50",
    )  # fmt: skip
    process = run_job(*job, wait=False)
    kill_when(process, lambda: sum(bodies(client, target).values()) >= 600, "some micro-batches")
    assert sum(bodies(client, target).values()) < 3000, "the query ended before it was killed"
    time.sleep(WINDOW_S + 1)
    run_job(*job)
    assert bodies(client, target) == Counter(f"in-{i}" for i in range(3000))
