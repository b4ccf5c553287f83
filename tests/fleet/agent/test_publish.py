"""CmsPublisher: batches of at most 21, buffering through throttling, a bounded buffer, invalid dropped."""

from __future__ import annotations

from fleet.agent.publish import CmsPublisher
from fleet.agent.sample import Point
from fleet.cloud.errors import InvalidRequest, NetworkError, Throttled


class RecordingSink:
    """Stands in for CmsAdapter.put_custom_metrics; fails while told to."""

    def __init__(self) -> None:
        self.calls: list[list] = []
        self.fail_with: Exception | None = None

    def put_custom_metrics(self, metrics) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append(list(metrics))

    @property
    def sent(self) -> list:
        return [m for call in self.calls for m in call]


def points(n: int, start_ms: int = 1_767_225_600_000, name: str = "vllm_num_requests_waiting") -> list[Point]:
    return [Point(name, {"instanceId": "i-1"}, float(i), start_ms + i) for i in range(n)]


def throttled() -> Throttled:
    return Throttled(
        "Throttling.User", "Request was denied due to user flow control.", "R1", 400, "PutCustomMetric"
    )


def test_points_go_out_in_batches_of_at_most_21():
    sink = RecordingSink()
    status = CmsPublisher(sink).publish(points(50))
    assert [len(c) for c in sink.calls] == [21, 21, 8]
    assert status.sent_points == 50 and status.buffered_points == 0


def test_custom_metrics_carry_group_0_dimensions_and_time():
    sink = RecordingSink()
    CmsPublisher(sink).publish(points(1))
    metric = sink.sent[0]
    assert metric.group_id == "0"
    assert dict(metric.dimensions) == {"instanceId": "i-1"}
    assert int(metric.timestamp.timestamp() * 1000) == 1_767_225_600_000


def test_throttled_points_are_buffered_then_flushed_next_period():
    sink = RecordingSink()
    publisher = CmsPublisher(sink)
    sink.fail_with = throttled()
    status = publisher.publish(points(10))
    assert status.sent_points == 0 and status.buffered_points == 10
    assert "Throttling.User" in (status.last_error or "")
    sink.fail_with = None
    status = publisher.publish(points(5, start_ms=1_767_225_615_000))
    assert status.sent_points == 15 and status.buffered_points == 0 and status.last_error is None
    assert [p.value for p in sink.sent][:10] == [float(i) for i in range(10)]  # oldest first


def test_network_errors_are_buffered_too():
    sink = RecordingSink()
    sink.fail_with = NetworkError("NetworkError", "connection refused")
    assert CmsPublisher(sink).publish(points(3)).buffered_points == 3


def test_buffer_is_bounded_and_drops_the_oldest():
    sink = RecordingSink()
    publisher = CmsPublisher(sink, max_buffered_points=25)
    sink.fail_with = throttled()
    publisher.publish(points(20))
    status = publisher.publish(points(20, start_ms=1_767_225_615_000))
    assert status.buffered_points == 25 and status.dropped_points_total == 15
    sink.fail_with = None
    publisher.flush()
    assert min(p.timestamp.timestamp() for p in sink.sent) >= 1_767_225_600.015 - 1e-6


def test_invalid_batch_is_dropped_and_counted_not_retried():
    sink = RecordingSink()
    publisher = CmsPublisher(sink)
    sink.fail_with = InvalidRequest("InvalidParameter", "bad metric", "R2", 400, "PutCustomMetric")
    status = publisher.publish(points(5))
    assert status.buffered_points == 0 and status.rejected_points_total == 5


def test_one_flush_sends_at_most_the_cap_of_batches():
    sink = RecordingSink()
    publisher = CmsPublisher(sink, max_batches_per_flush=2)
    sink.fail_with = throttled()
    publisher.publish(points(100))
    sink.fail_with = None
    assert publisher.flush() == 42 and publisher.buffered_points == 58
