"""The book: a warm container's per-queue memory, bounded, and never silent about what it
forgets (issue 31.2)."""

from __future__ import annotations

from controller.actuator import InMemoryActuator
from controller.book import ClaimOver, Count, Learned, MappingGone, Mark, Marked, QueueBook
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Action, AuditEntry, AuditEvent
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from tests.factories import config, sample, state

QUEUES = tuple(f"q{index}" for index in range(5))


def storms(start: float, *queues: str) -> list:  # type: ignore[type-arg]
    return [
        sample(queue, at=start + s + 0.9, ok=8, throttled=2, invocation_ms=500)
        for s in range(10)
        for queue in queues
    ]


def test_a_batch_naming_more_queues_than_the_book_holds_cuts_every_storm() -> None:
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for queue in QUEUES:
        ledger.put_config(config(queue))
        actuator.add_mapping(f"esm-{queue}", 100)
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd(), capacity=3)

    done = loop.run_batch(storms(100, *QUEUES), now=110.0).done

    assert sorted((d.queue, d.action, d.target) for d in done) == [
        (queue, Action.MULTIPLICATIVE_DECREASE, 50) for queue in QUEUES
    ]
    assert loop.counters[Count.SAMPLES_WINDOWED] == 10 * len(QUEUES)
    # Once planned, the windows beyond the bound are forgotten: counted, and reported once.
    assert loop.counters[Count.WINDOWS_FORGOTTEN] == 2
    [notice] = loop.take_notices()
    assert notice.counter == Count.WINDOWS_FORGOTTEN
    assert "more queues have telemetry than this container keeps windows for (3)" in (
        notice.message
    )
    loop.run_batch(storms(113, *QUEUES), now=124.0)
    assert loop.counters[Count.WINDOWS_FORGOTTEN] == 4
    assert loop.take_notices() == []


def test_a_waiting_queue_keeps_its_window_until_planned() -> None:
    book = QueueBook(capacity=1)
    for queue in ("a", "b", "c"):
        assert book.add_sample(sample(queue, at=100.0))
    assert book.pending() == {"a", "b", "c"}
    assert all(book.window(q).newest_event_time == 100.0 for q in ("a", "b", "c"))

    book.planned(["a", "b", "c"])

    assert book.pending() == set()
    assert [book.window(q).newest_event_time for q in ("a", "b", "c")] == [None, None, 100.0]
    assert book.counters[Count.WINDOWS_FORGOTTEN] == 2


def test_a_queue_asked_to_retry_keeps_its_window() -> None:
    book = QueueBook(capacity=1)
    book.add_sample(sample("a", at=100.0))
    book.planned(["a"])
    book.apply([Marked("a", Mark.RETRY)])
    book.add_sample(sample("b", at=100.0))
    book.planned(["b"])
    assert book.window("a").newest_event_time == 100.0
    assert book.counters[Count.WINDOWS_FORGOTTEN] == 0


def test_effects_are_what_the_book_remembers() -> None:
    book = QueueBook()
    claimed = state(concurrency=50).evolve(last_action=Action.MULTIPLICATIVE_DECREASE, version=3)
    book.learn(claimed)
    assert book.is_unsettled("orders")
    book.learn(claimed.evolve(version=2))  # an older read changes nothing
    assert book.state("orders") == claimed

    book.apply([Learned(claimed.evolve(version=4))])
    assert not book.is_unsettled("orders")
    book.apply([Marked("orders", Mark.CONFLICTED)])
    assert book.state("orders") is None
    assert book.pending() == {"orders"}
    assert book.counters[Count.VERSION_CONFLICTS] == 1

    book.apply([MappingGone("orders", "esm-orders", recheck_at=1000.0)] * 2)
    assert book.is_set_aside("orders", 999.0) and not book.is_set_aside("orders", 1000.0)
    assert book.pending() == set()
    assert book.counters[Count.MAPPINGS_MISSING] == 1
    assert len(book.take_notices()) == 1


def test_a_batch_naming_more_queues_than_the_book_holds_reads_no_mapping_for_a_stored_state() -> (
    None
):
    """Issue 31.4: states read from the ledger and forgotten by the book before their turn are
    used as read; a read of the mapping is a control-plane call, paced at 12 a second."""
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for queue in QUEUES:
        ledger.put_config(config(queue))
        ledger.commit(
            state(queue=queue),
            AuditEntry(queue, 90.0, AuditEvent.OPERATOR, 100, 100, "X", "x"),
        )
        actuator.add_mapping(f"esm-{queue}", 100)
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd(), capacity=3)

    done = loop.run_batch(storms(100, *QUEUES), now=110.0).done

    assert sorted((d.queue, d.target) for d in done) == [(queue, 50) for queue in QUEUES]
    assert actuator.reads == 0 and actuator.list_pages == 1


def test_states_the_book_held_are_used_though_learning_others_forgets_them() -> None:
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for queue in QUEUES:
        ledger.put_config(config(queue))
        ledger.commit(
            state(queue=queue),
            AuditEntry(queue, 90.0, AuditEvent.OPERATOR, 100, 100, "X", "x"),
        )
        actuator.add_mapping(f"esm-{queue}", 100)
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd(), capacity=3)
    loop.run_batch([sample(queue, at=99.0) for queue in QUEUES[:3]], now=100.0)

    # The book holds q0-q2; learning q3 and q4 from the ledger forgets two of them.
    done = loop.run_batch(storms(100, *QUEUES), now=110.0).done

    assert sorted((d.queue, d.target) for d in done) == [(queue, 50) for queue in QUEUES]
    assert actuator.reads == 0


def test_a_claim_this_container_gave_up_on_is_held_as_over() -> None:
    book = QueueBook()
    claimed = state(concurrency=50).evolve(
        last_action=Action.MULTIPLICATIVE_DECREASE, version=3, apply_by=170.0
    )
    book.apply([Learned(claimed), ClaimOver("orders", 170.0)])
    assert book.state("orders") == claimed.evolve(apply_by=0.0)
    # Read again from the ledger (after a conflict forgot it): still over here.
    book.apply([Marked("orders", Mark.CONFLICTED)])
    assert book.learn(claimed) == claimed.evolve(apply_by=0.0) == book.state("orders")
    # Another claim (another end) is another container's, or a later one: in flight.
    later = claimed.evolve(version=5, apply_by=230.0)
    assert book.learn(later) == later
