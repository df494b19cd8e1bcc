"""What an object graph holds: the fleet benchmark's measure of a controller's own memory."""

from __future__ import annotations

import sys

from load.bench.held import held_bytes


class Twin:
    def __init__(self) -> None:
        self.items = [bytes(1000) for _ in range(10)]


class Controller:
    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.cache = {"orders": bytes(500)}
        self.emit = print  # code and what it reaches are no instance's memory


def test_the_controllers_memory_leaves_its_twins_out_and_counts_each_object_once() -> None:
    twin = Twin()
    controller = Controller(twin)
    controller.cache["again"] = controller.cache["orders"]
    alone = held_bytes(controller, [twin])
    whole = held_bytes(controller)
    assert whole - alone == held_bytes(twin) > 10 * 1000
    assert sys.getsizeof(bytes(500)) < alone < 2000
    # What the twin holds grows; what the controller holds does not.
    twin.items.append(bytes(10_000))
    assert held_bytes(controller, [twin]) == alone
