"""The live view's depth of a queue (stack/local/runtime/sqs_poller.py ``read_depth``): one
frame's reads count a message once, though SQS moves it to the dead-letter queue between
them."""

from __future__ import annotations

from typing import Any

from stack.local.runtime.sqs_poller import read_depth


class MovingSqs:
    """A twin of SQS's ``GetQueueAttributes`` on a queue and its dead-letter queue, where a
    receive moves one message to the dead-letter queue after every read (its receive count
    spent), as a poller's receive may between a frame's two reads."""

    def __init__(self, visible: int) -> None:
        self.depths = {"queue": visible, "dlq": 0}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        attributes = {"ApproximateNumberOfMessages": str(self.depths[QueueUrl])}
        if "ApproximateNumberOfMessagesNotVisible" in AttributeNames:
            attributes["ApproximateNumberOfMessagesNotVisible"] = "0"
        if self.depths["queue"] > 0:
            self.depths["queue"] -= 1
            self.depths["dlq"] += 1
        return {"Attributes": attributes}


def test_a_message_moved_between_the_reads_is_not_counted_twice() -> None:
    sqs = MovingSqs(visible=5)
    frames = []
    for _ in range(6):
        depth = read_depth(sqs, "queue", "dlq")
        frames.append(depth.visible + depth.in_flight + depth.dead_lettered)
    assert max(frames) <= 5
    # Nothing is lost either: once the moves are over, the frame counts every message.
    assert frames[-1] == 5


def test_a_queue_without_a_dead_letter_queue_reads_only_itself() -> None:
    sqs = MovingSqs(visible=3)
    depth = read_depth(sqs, "queue", None)
    assert (depth.visible, depth.in_flight, depth.dead_lettered) == (3, 0, 0)
