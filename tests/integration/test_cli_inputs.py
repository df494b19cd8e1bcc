"""Bad command-line input: exit status 2 and one line on stderr saying what is wrong, at once.

Every case runs ``main()`` in process, so a traceback fails the test with the exception itself;
the timeout is a guard against runaways (each case is refused before any real work), not a
measurement.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from load.localfleet import LocalFleet, build_fleet
from load.recording import (
    EARLIEST_ARRIVAL,
    LATEST_ARRIVAL,
    RecordedLine,
    RecordingError,
    emf_line,
    log_group_of,
    subscription_payload,
)
from load.replay import ReplayConfig, ReplayError, replay
from stack.cli import main
from tests.factories import sample

START = 1_800_000_000.0
RUNAWAY_GUARD_S = 60


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a case's arguments may refer to: a registered fleet, files, a closed port."""

    fleet: LocalFleet
    directory: Path
    closed_port: int

    @property
    def target(self) -> list[str]:
        return ["--endpoint-url", self.fleet.endpoint, "--table", self.fleet.table]

    @property
    def esm(self) -> str:
        return self.fleet.mappings["orders"]

    def file(self, name: str, text: str) -> str:
        path = self.directory / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    def recording(self, *lines: str) -> str:
        return self.file("recording.jsonl", "".join(f"{line}\n" for line in lines))

    def good_recording(self) -> str:
        return self.recording(line(START, "1"), line(START + 30, "2"))


def line(arrival: float, sequence: str) -> str:
    """One recording line: a healthy document of queue ``orders``."""
    document = emf_line(sample(at=START))
    data = subscription_payload([(START, document)], log_group_of("orders"), "worker")
    return RecordedLine(arrival, "shardId-000000000000", sequence, "k", data).to_json()


Case = tuple[str, Callable[[Inputs], list[str]], str]

BAD_INPUTS: list[Case] = [
    # register: the mapping id's shape is checked before any call
    ("register", lambda i: ["register", "orders", "--esm", "nope", *i.target], "not an event"),
    ("register", lambda i: ["register", "orders", "--esm", "", *i.target], "not an event"),
    (
        "register",
        lambda i: ["register", "orders", "--esm", i.esm, "--cmax", "9" * 400, *i.target],
        "--cmax: must be a finite number",
    ),
    (
        "register",
        lambda i: ["register", "orders", "--esm", i.esm, "--table", "t", "--endpoint-url", "x"],
        "not an http(s) URL",
    ),
    # register: the queue's standing in its group, bounded as the controller reads it back
    *(
        (
            "register",
            lambda i, flag=flag, value=value: [
                "register",
                "orders",
                "--esm",
                i.esm,
                flag,
                value,
                *i.target,
            ],
            expected,
        )
        for flag, value, expected in [
            ("--weight", "500", "--weight must be 0.01..100, got 500"),
            ("--weight", "0", "--weight must be 0.01..100"),
            ("--weight", "nan", "--weight: must be a finite number"),
            ("--weight", "heavy", "--weight: not a number"),
            ("--priority", "10", "--priority must be a whole number 0..9, got 10"),
            ("--priority", "-1", "--priority must be a whole number 0..9"),
            ("--priority", "1.5", "--priority must be a whole number 0..9, got '1.5'"),
            ("--group", "", "--group must be 1..256 printable characters"),
            ("--group", " payments", "--group must be 1..256 printable characters"),
            ("--group", "x" * 300, "--group must be 1..256 printable characters"),
        ]
    ),
    # audit --since: bounded, between 1970 and now
    ("audit", lambda i: ["audit", "orders", "--since", "99999999999d", *i.target], "before 1970"),
    ("audit", lambda i: ["audit", "orders", "--since", "9" * 400, *i.target], "neither ISO"),
    ("audit", lambda i: ["audit", "orders", "--since", "9" * 400 + "s", *i.target], "1970"),
    ("audit", lambda i: ["audit", "orders", "--since", "0001-01-01", *i.target], "before 1970"),
    ("audit", lambda i: ["audit", "orders", "--since", "9999-12-31", *i.target], "in the future"),
    # status: the endpoint's shape, arguments left over
    ("status", lambda i: ["status", "--endpoint-url", "", "--table", "t"], "not an http(s)"),
    ("status", lambda i: ["status", "--endpoint-url", "ftp://x", "--table", "t"], "not an http"),
    ("status", lambda i: ["status", "--json", "extra", *i.target], "unrecognized arguments"),
    # replay: the recording
    ("replay", lambda i: ["replay", i.recording()], "holds no record to replay"),
    ("replay", lambda i: ["replay", i.recording(line(START, "²"))], "decimal digits (0-9)"),
    (
        "replay",
        lambda i: ["replay", i.recording(line(START, "²")), "--skip-bad"],
        "1 broken line(s) skipped",
    ),
    ("replay", lambda i: ["replay", i.recording(line(START, "1" * 5000))], "decimal digits"),
    ("replay", lambda i: ["replay", i.recording(line(1e300, "1"))], "between 2000 and 2100"),
    ("replay", lambda i: ["replay", i.recording(line(1e13, "1"))], "between 2000 and 2100"),
    ("replay", lambda i: ["replay", i.recording(line(-1e12, "1"))], "between 2000 and 2100"),
    (
        "replay",
        lambda i: ["replay", i.recording(line(START, "1"), line(START + 3e7, "2"))],
        "500000 ticks, more than 10080",
    ),
    (
        "replay",
        lambda i: ["replay", i.recording(line(1e9, "1"), line(1e9 + 1.7e9, "2"))],
        "more than 10080",
    ),
    # replay --config: every value checked, booleans and strings are not numbers
    (
        "replay",
        lambda i: [
            "replay",
            i.good_recording(),
            "--config",
            i.file("c.json", '{"params": {"t1": true}}'),
        ],
        "'t1' must be a finite number, got True",
    ),
    (
        "replay",
        lambda i: [
            "replay",
            i.good_recording(),
            "--config",
            i.file("c.json", '{"queues": {"orders": {"overrides": {"cmax": "100"}}}}'),
        ],
        "'cmax' must be a finite number",
    ),
    (
        "replay",
        lambda i: [
            "replay",
            i.good_recording(),
            "--config",
            i.file("c.json", '{"params": {"stale_after_s": Infinity}}'),
        ],
        "'stale_after_s' must be a finite number",
    ),
    (
        "replay",
        lambda i: [
            "replay",
            i.good_recording(),
            "--config",
            i.file("c.json", '{"queues": {"": {}}}'),
        ],
        "a queue name is empty",
    ),
    # replay --expect: read before the replay runs
    (
        "replay",
        lambda i: ["replay", i.good_recording(), "--expect", str(i.directory / "missing.json")],
        "cannot read expected decisions",
    ),
    (
        "replay",
        lambda i: ["replay", i.good_recording(), "--expect", i.file("e.json", "{nope")],
        "are not JSON",
    ),
    (
        "replay",
        lambda i: ["replay", i.good_recording(), "--expect", i.file("e.json", "[1]")],
        "decision 1 is not a decision",
    ),
    # replay against a stack that is not there
    (
        "replay",
        lambda i: [
            "replay",
            i.good_recording(),
            "--endpoint-url",
            f"http://127.0.0.1:{i.closed_port}",
            "--table",
            "t",
        ],
        "cannot reach",
    ),
    (
        "replay",
        lambda i: [
            "replay",
            i.good_recording(),
            "--endpoint-url",
            i.fleet.endpoint,
            "--table",
            "no-such-table",
        ],
        "ledger table 'no-such-table' not found",
    ),
    # record, simulate, bench, demo
    (
        "record",
        lambda i: ["record", "--stream", "", "--out", str(i.directory / "o.jsonl"), *i.target],
        "not a Kinesis stream name",
    ),
    (
        "simulate",
        lambda i: [
            "simulate",
            "--scenario",
            "capacity-drop",
            "--policy",
            "queuemesh",
            "--record",
            str(i.directory),
        ],
        "is a directory",
    ),
    ("bench", lambda i: ["bench", "decode", "--records", "9" * 20], "at most 10000"),
    ("bench", lambda i: ["bench", "decode", "--repeat", "9" * 12], "at most 100;"),
    ("bench", lambda i: ["bench", "fleet", "--max-invocations", "0"], "must be 1..100"),
    ("demo", lambda i: ["demo", "--duration", "nan", "--no-plot"], "both finite"),
    ("demo", lambda i: ["demo", "--duration", "inf", "--no-plot"], "both finite"),
    ("demo", lambda i: ["demo", "--telemetry-shards", "0", "--no-plot"], "must be 1..64"),
    ("demo", lambda i: ["demo", "--parallelization-factor", "11", "--no-plot"], "1..10, got"),
]


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str) -> LocalFleet:
    """Queue ``orders`` registered, so commands get past "not registered" to the input."""
    return build_fleet(moto_endpoint, ["orders"], register=True, suffix="-cli-inputs")


@pytest.fixture
def inputs(fleet: LocalFleet, tmp_path: Path) -> Iterator[Inputs]:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    yield Inputs(fleet, tmp_path, closed_port)


@pytest.mark.timeout(RUNAWAY_GUARD_S)
@pytest.mark.parametrize(
    ("command", "argv", "says"),
    BAD_INPUTS,
    ids=[f"{command}-{number}" for number, (command, _, _) in enumerate(BAD_INPUTS)],
)
def test_a_bad_input_is_one_line_and_status_2(
    command: str,
    argv: Callable[[Inputs], list[str]],
    says: str,
    inputs: Inputs,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    try:
        status = main(argv(inputs))
    except SystemExit as exit_:  # argparse's own errors
        status = int(exit_.code or 0)
    captured = capsys.readouterr()
    assert status == 2, captured
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"queuemesh {command}: error: ")
    assert says in captured.err


def test_a_valid_replay_still_runs(inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    """The checks refuse what they should, not a plain recording with config and golden log."""
    recording = inputs.good_recording()
    config = inputs.file("c.json", json.dumps({"params": {"t1": 0.1, "cmax": 50}}))
    assert main(["replay", recording, "--config", config, "--json"]) == 0
    golden = inputs.file("golden.json", capsys.readouterr().out)
    assert main(["replay", recording, "--config", config, "--expect", golden]) == 0
    assert "replay matches" in capsys.readouterr().err


def test_the_tick_bound_is_checked_before_the_controller_runs() -> None:
    """Bounded by construction: the refusal comes before any adapter is touched."""

    class Untouchable:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the replay used the adapters ({name}) before refusing")

    records = [
        RecordedLine.from_json(line(START, "1")),
        RecordedLine.from_json(line(START + 60 * 10_081, "2")),
    ]
    with pytest.raises(ReplayError, match="more than 10080"):
        replay(records, ReplayConfig(), ledger=Untouchable(), actuator=Untouchable())
    # The same span without scheduled ticks does only the batches' work.
    report = replay(records, ReplayConfig(schedule_s=None))
    assert (report.batches, report.ticks) == (2, 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@settings(max_examples=300)
@given(
    arrival=json_values | st.floats(EARLIEST_ARRIVAL, LATEST_ARRIVAL),
    sequence=json_values | st.text("0123456789²٣", min_size=1, max_size=140),
    data=json_values | st.just("eA=="),
)
def test_a_recording_line_is_a_sane_record_or_a_recording_error(
    arrival: object, sequence: object, data: object
) -> None:
    text = json.dumps(
        {"arrival": arrival, "shard": "s", "sequence": sequence, "partition_key": "k", "data": data}
    )
    try:
        record = RecordedLine.from_json(text, 1)
    except RecordingError:
        return
    assert EARLIEST_ARRIVAL <= record.arrival < LATEST_ARRIVAL
    assert int(record.sequence) >= 0  # what batching and de-duplication compare


@pytest.mark.timeout(RUNAWAY_GUARD_S)
def test_a_registration_holding_a_bad_mapping_id_is_one_line(
    fleet: LocalFleet, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-edited CONFIG item: botocore refuses the id before sending (the actuator does not
    retry that), and the CLI says so in one line."""
    from controller.ledger import DynamoLedger
    from controller.model import QueueConfig
    from controller.policy import memory_type
    from load.localfleet import client

    ledger = DynamoLedger(fleet.table, client(fleet.endpoint, "dynamodb"), memory_types=memory_type)
    ledger.put_config(QueueConfig(queue="edited", esm_uuid="nope"))
    target = ["--endpoint-url", fleet.endpoint, "--table", fleet.table]
    assert main(["pin", "edited", "10", *target]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("queuemesh pin: error: mapping nope: ")
    assert "Parameter validation failed" in err


@pytest.mark.parametrize("bench", ["decode", "worker", "fleet", "telemetry"])
def test_each_bench_says_what_it_measures_in_whole_sentences(
    bench: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", bench, "--help"])
    assert exit_.value.code == 0
    described = capsys.readouterr().out.split("\n\n")[1]
    assert described.rstrip().endswith(".")
