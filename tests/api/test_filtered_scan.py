"""A tag-filtered pull over a long run of messages that do not match scans a bounded slice of the
queue per request and says where it stopped; the client goes on from there."""

from __future__ import annotations

import httpx

from app.broker import MAX_SCAN_SLICES_PER_PULL

OTHERS = 60_000
SCAN_ENTRIES = 16_000 // 20  # WHARF_MAX_SCAN_BYTES_PER_PULL's default, in ConsumeQueue entries


def test_a_filtered_pull_scans_a_bounded_slice_and_answers_where_it_stopped(
    client: httpx.Client, topic: str
) -> None:
    batch = [{"body": "other", "tags": "Other", "queue_id": 0}] * 5000
    for _ in range(OTHERS // len(batch)):
        assert client.post(f"/v1/topics/{topic}/messages", json={"messages": batch}).status_code == 200
    client.post(f"/v1/topics/{topic}/messages", json={"body": "wanted", "tags": "Wanted", "queue_id": 0})

    offset, answers = 0, []
    while True:
        answer = client.get(
            f"/v1/topics/{topic}/queues/0/messages",
            params={"offset": offset, "tags": "Wanted", "max_wait_ms": 5000},
        ).json()
        answers.append(answer)
        if answer["status"] == "FOUND":
            break
        assert answer["status"] == "NO_MATCHED_MESSAGE"
        assert answer["messages"] == []
        assert offset < answer["next_offset"] <= offset + MAX_SCAN_SLICES_PER_PULL * SCAN_ENTRIES
        offset = answer["next_offset"]
        assert len(answers) < 100, "the scan does not move on"
    assert [m["body"] for m in answers[-1]["messages"]] == ["wanted"]
    assert answers[-1]["messages"][0]["queue_offset"] == OTHERS
    # 60,000 entries are more than one answer may scan: it took several.
    assert len(answers) >= 2
