"""`queuemesh replay`: batching, determinism, golden decision logs, configs and broken lines."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.ledger import InMemoryLedger
from controller.model import Mode, QueueConfig, Sample
from controller.policy import ALGORITHMS, LimitAlgorithm, Situation, Verdict, memory_type
from controller.policy.base import NoMemory
from load.recording import (
    RecordedLine,
    emf_line,
    log_group_of,
    read_recording,
    subscription_payload,
)
from load.replay import (
    QueueSetup,
    ReplayConfig,
    ReplayError,
    VirtualClock,
    config_document,
    deployed_config,
    in_memory_adapters,
    kinesis_batches,
    load_config,
    parse_config,
    replay,
)
from stack.cli import main
from stack.local.demo.run import replay_config_path, write_replay_config
from tests.paths import GOLDEN

START = 1_800_000_000.0
STORM = (40, 100)  # seconds from the start during which "orders" gets 40% 429s
BILLING_STOPS = 110  # "billing" telemetry stops here (its worker went quiet)
DURATION = 180


def build_storm_recording() -> str:
    """The recording in tests/golden/storm.jsonl: a 429 storm on one queue of two.

    Four invocations a second per queue, ten calls each; every two seconds a worker's logs reach
    its shard as one subscription record, 1.5 s after the last document. "orders" sees 40% of
    its calls answered 429 (Retry-After 5 s) between 40 s and 100 s; "billing" is healthy and
    goes quiet at 110 s. A plain log line and a CONTROL_MESSAGE ride along, as on a real stream.
    """
    records: list[tuple[float, str, bytes]] = []
    for second in range(0, DURATION, 2):
        for queue, shard in (
            ("orders", "shardId-000000000000"),
            ("billing", "shardId-000000000001"),
        ):
            if queue == "billing" and second >= BILLING_STOPS:
                continue
            stormy = queue == "orders" and STORM[0] <= second < STORM[1]
            events = []
            for tick in range(8):
                at = START + second + tick * 0.25
                sample = Sample(
                    queue=queue,
                    event_time=at,
                    requests=10,
                    ok=6 if stormy else 10,
                    throttled=4 if stormy else 0,
                    retry_after_s=5.0 if stormy else 0.0,
                    invocation_ms=400.0,
                )
                events.append((at, emf_line(sample)))
            arrival = events[-1][0] + 1.5
            events.insert(3, (START + second + 0.7, "START RequestId: 1 Version: $LATEST"))
            payload = subscription_payload(events, log_group_of(queue), f"{queue}/[$LATEST]0")
            records.append((arrival, shard, payload))
    control = gzip.compress(b'{"messageType":"CONTROL_MESSAGE","logEvents":[]}', mtime=0)
    records.append((START + 5.0, "shardId-000000000000", control))
    records.sort(key=lambda record: record[0])
    # Kinesis numbers a shard's records in arrival order.
    sequences = {"shardId-000000000000": 0, "shardId-000000000001": 0}
    lines = []
    for arrival, shard, data in records:
        sequences[shard] += 1
        line = RecordedLine(round(arrival, 3), shard, str(sequences[shard]), "worker", data)
        lines.append(line.to_json() + "\n")
    return "".join(lines)


@pytest.fixture
def storm_file(tmp_path: Path) -> Path:
    path = tmp_path / "storm.jsonl"
    path.write_text(build_storm_recording())
    return path


def _replay_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    assert main(["replay", str(path), "--json", *extra]) == 0
    return list(json.loads(capsys.readouterr().out))


# --- behaviour ------------------------------------------------------------------------------


def test_replay_is_deterministic(storm_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _replay_json(storm_file, capsys)
    second = _replay_json(storm_file, capsys)
    assert first == second
    assert len(first) > 50


def test_every_decision_carries_the_contract_fields(
    storm_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decisions = _replay_json(storm_file, capsys)
    required = {"time", "queue", "action", "state", "previous", "target", "reason"}
    assert all(required <= decision.keys() for decision in decisions)
    assert {d["queue"] for d in decisions} == {"orders", "billing"}
    assert all(d["reason"] for d in decisions)


def test_the_storm_is_cut_and_recovered_and_a_quiet_queue_is_held(storm_file: Path) -> None:
    recording = read_recording(storm_file, skip_bad=False)
    report = replay(recording.records, ReplayConfig(algorithm="aimd"))
    orders = [d for d in report.decisions if d.queue == "orders"]
    cuts = [d for d in orders if d.target < d.previous]
    raises = [d for d in orders if d.target > d.previous]
    storm_start, storm_end = START + STORM[0], START + STORM[1]
    assert cuts and all(storm_start <= d.time <= storm_end + 10 for d in cuts)
    assert cuts[0].previous == 100 and cuts[0].state == "THROTTLED"
    assert any(d.state == "CRITICAL_BACKOFF" for d in cuts)
    assert raises and all(d.time > storm_end for d in raises)
    billing = [d for d in report.decisions if d.queue == "billing"]
    assert all(d.target == d.previous == 100 for d in billing)
    assert report.skipped  # the plain log line and the CONTROL_MESSAGE are counted, not fatal


def _golden_cases() -> list[str]:
    """Every ``<case>.decisions.json`` under tests/golden/: the recording is the file named by
    the case's first dotted part (``storm.fast`` would replay ``storm.jsonl``), the config is
    ``<case>.config.json`` when there is one."""
    return sorted(p.name.removesuffix(".decisions.json") for p in GOLDEN.glob("*.decisions.json"))


@pytest.mark.parametrize("case", _golden_cases())
def test_golden_decision_logs_match(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    _assert_replays_to_golden(GOLDEN / f"{case.split('.')[0]}.jsonl", case, capsys)


def _assert_replays_to_golden(
    recording: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = GOLDEN / f"{case}.config.json"
    argv = ["replay", str(recording), "--expect", str(GOLDEN / f"{case}.decisions.json")]
    code = main(argv + (["--config", str(config)] if config.exists() else []))
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "replay matches" in captured.err


def test_the_recorded_incidents_have_golden_logs() -> None:
    assert {"storm.aimd", "storm.adaptive", "capacity-drop.aimd", "capacity-drop.adaptive"} <= set(
        _golden_cases()
    )


def test_golden_storm_recording_is_the_documented_one(storm_file: Path) -> None:
    def contents(path: Path) -> list[tuple[float, str, str, str, bytes]]:
        # Compared inflated: gzip's bytes may differ across zlib builds, the records do not.
        records = read_recording(path, skip_bad=False).records
        return [
            (r.arrival, r.shard, r.sequence, r.partition_key, gzip.decompress(r.data))
            for r in records
        ]

    assert contents(GOLDEN / "storm.jsonl") == contents(storm_file)


def test_a_changed_behaviour_shows_as_a_readable_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = json.loads((GOLDEN / "storm.adaptive.decisions.json").read_text())
    first_cut = next(i for i, d in enumerate(golden) if d["target"] < d["previous"])
    cut = f"{golden[first_cut]['previous']}->{golden[first_cut]['target']} "
    golden[first_cut]["target"] = 60
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(golden))

    code = main(["replay", str(GOLDEN / "storm.jsonl"), "--expect", str(altered)])

    out = capsys.readouterr().out
    assert code == 1
    removed = [line for line in out.splitlines() if line.startswith("-") and "->60" in line]
    added = [line for line in out.splitlines() if line.startswith("+") and cut in line]
    assert len(removed) == 1 and len(added) == 1
    assert out.startswith(f"--- {altered}")


def test_changes_only_drops_holds(storm_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    everything = _replay_json(storm_file, capsys)
    changes = _replay_json(storm_file, capsys, "--changes")
    assert changes == [d for d in everything if d["changed"]]
    assert all(d["action"] != "HOLD" or d["state"] != "HEALTHY" for d in changes)


def test_table_output_names_each_decision(
    storm_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(storm_file), "--changes", "--algorithm", "aimd"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["t", "(s)", "queue", "action"]
    assert any("100 -> 50" in line and "MULTIPLICATIVE_DECREASE" in line for line in lines)


# --- configuration --------------------------------------------------------------------------


def test_config_registers_only_the_listed_queues(
    storm_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "replay.json"
    config.write_text(
        json.dumps(
            {
                "algorithm": "aimd",
                "params": {"t1": 0.5},
                "batching": {"batch_size": 50, "window_s": 2},
                "queues": {"orders": {"esm_uuid": "esm-1", "concurrency": 40}},
            }
        )
    )
    assert main(["replay", str(storm_file), "--json", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    decisions = json.loads(captured.out)
    assert {d["queue"] for d in decisions} == {"orders"}
    # T1 of 50% is never reached by a 40% storm; the mapping started at 40, below Cmax.
    assert not any(d["target"] < d["previous"] for d in decisions)
    assert decisions[0]["previous"] == 40
    assert "samples of unregistered queues ignored" in captured.err


def test_a_replay_without_config_says_in_one_line_that_it_decides_with_the_defaults(
    storm_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(storm_file), "--changes"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "no --config" in line]
    assert len(notes) == 1
    assert "default settings (Cmin 2, Cmax 100, algorithm adaptive)" in notes[0]
    config = tmp_path / "replay.json"
    config.write_text('{"algorithm": "aimd"}')
    assert main(["replay", str(storm_file), "--changes", "--config", str(config)]) == 0
    assert "no --config" not in capsys.readouterr().err


def test_the_demos_recorded_config_replays_its_queues_as_registered(tmp_path: Path) -> None:
    """What `queuemesh demo --record` writes beside the recording: the controller's policy
    from its environment, each queue as the demo registered it (the first under the
    template's bounds, the others with their own), read back by replay's own parser."""
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_config(QueueConfig(queue="stack-orders", esm_uuid="esm-orders"))
    ledger.put_config(
        QueueConfig(queue="stack-refunds", esm_uuid="esm-refunds", overrides={"cmin": 2, "cmax": 3})
    )
    controller_env = {
        "QUEUEMESH_TABLE": "ledger",
        "QUEUEMESH_CMIN": "2",
        "QUEUEMESH_CMAX": "16",
        "QUEUEMESH_ALGORITHM": "aimd",
    }
    recording = tmp_path / "demo.jsonl"
    command = write_replay_config(
        recording, controller_env, ledger, {"stack-orders": 16, "stack-refunds": 3}
    )

    path = replay_config_path(recording)
    assert path == tmp_path / "demo.config.json"
    assert command == f"queuemesh replay {recording} --config {path}"
    config = load_config(path)
    assert config.algorithm == "aimd"
    assert config.queues is not None and set(config.queues) == {"stack-orders", "stack-refunds"}
    params = {name: config.params.with_overrides(s.overrides) for name, s in config.queues.items()}
    bounds = {
        name: (params[name].cmin, params[name].cmax, setup.concurrency)
        for name, setup in config.queues.items()
    }
    assert bounds == {"stack-orders": (2, 16, 16), "stack-refunds": (2, 3, 3)}
    # Registered as the demo's: no named group, so each queue's group is the downstream its
    # telemetry names, live and replayed.
    replayed, _ = in_memory_adapters(config, [], VirtualClock())
    assert {(c.queue, c.esm_uuid, c.group) for c in replayed.list_configs()} == {
        ("stack-orders", "esm-orders", None),
        ("stack-refunds", "esm-refunds", None),
    }
    # Spelled out whole: the document is the config, read back unchanged.
    assert parse_config(config_document(config)) == config


def test_a_queue_in_a_named_group_is_refused_not_dropped_from_a_recorded_config() -> None:
    grouped = QueueConfig(queue="orders", esm_uuid="esm-orders", group="payments")
    with pytest.raises(ReplayError, match="'orders' has a group"):
        deployed_config({}, [grouped], {})


def test_dry_run_decides_but_never_moves_the_mapping(storm_file: Path) -> None:
    records = read_recording(storm_file, skip_bad=False).records
    config = ReplayConfig(queues={"orders": QueueSetup(mode=Mode.DRY_RUN)})
    ledger, actuator = in_memory_adapters(config, ["orders"], VirtualClock())
    report = replay(records, config, ledger=ledger, actuator=actuator)
    assert any(d.target < d.previous for d in report.decisions)
    assert actuator.calls == []
    trail = ledger.audit_trail("orders")
    assert trail and all(entry.reason.startswith("[dry-run]") for entry in trail)


def test_replay_dry_run_shows_the_plans_and_writes_nothing(storm_file: Path) -> None:
    records = read_recording(storm_file, skip_bad=False).records
    config = ReplayConfig()
    ledger, actuator = in_memory_adapters(config, ["orders"], VirtualClock())
    report = replay(records, config, ledger=ledger, actuator=actuator, dry_run=True)
    assert (actuator.calls, ledger.audit_trail("orders")) == ([], [])
    changes = [d for d in report.decisions if d.changed]
    shown = [line for _, line in report.plan_lines if not line.startswith("hold ")]
    # Every step shown, one line each: a change is an update or a record, the rest holds,
    # but for the HOLDs recorded because they changed the law's memory (a failed test of
    # Cmin lengthening the pause): a record at the same level.
    remembered = [line for line in shown if line.startswith("record ") and "[HOLD]" in line]
    assert len(report.plan_lines) == len(report.decisions)
    assert len(shown) - len(remembered) == len(changes) > 0 and remembered
    assert shown[0].startswith(f"update orders (replay-orders): {changes[0].previous} -> ")


def test_replay_dry_run_cli_prints_one_line_per_change(
    storm_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(storm_file), "--dry-run", "--changes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(" update " in line or " record " in line for line in lines)
    assert main(["replay", str(storm_file), "--dry-run", "--json"]) == 2
    assert "--dry-run prints plans" in capsys.readouterr().err


def test_scheduled_ticks_run_between_batches_and_change_nothing_for_aimd(
    storm_file: Path,
) -> None:
    records = read_recording(storm_file, skip_bad=False).records
    plain = replay(records, ReplayConfig(algorithm="aimd"))
    ticking = replay(records, parse_config({"schedule_s": 5, "algorithm": "aimd"}))
    span = records[-1].arrival - records[0].arrival
    assert abs(ticking.ticks - span // 5) <= 1
    # The original rule never asks to be woken: ticks find nothing due.
    assert ticking.decisions == plain.decisions


class AlarmClock(LimitAlgorithm[NoMemory]):
    """A test algorithm that only ever asks to be woken again 7 s later (as a paused mapping
    does), holding its value: what it decides shows when the controller looked at the queue."""

    name = "alarm-clock"

    def decide(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        state, now = situation.state, situation.now
        reason = f"Looked at {now:.1f}; again in 7s."
        return Verdict(state.concurrency, state.state, reason, situation.memory, wake_at=now + 7)


def test_ticks_look_at_queues_while_no_telemetry_arrives(
    storm_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ALGORITHMS, AlarmClock.name, AlarmClock)
    # Forty seconds in which no record arrives at all (every worker paused or gone quiet).
    gap = (START + 120.0, START + 160.0)
    records = [
        r
        for r in read_recording(storm_file, skip_bad=False).records
        if not gap[0] <= r.arrival < gap[1]
    ]
    last_before_gap = max(r.arrival for r in records if r.arrival < gap[0])

    def looked_at_in_gap(schedule_s: float | None) -> list[float]:
        report = replay(records, ReplayConfig(algorithm=AlarmClock.name, schedule_s=schedule_s))
        return [d.time for d in report.decisions if last_before_gap + 1.5 < d.time < gap[1]]

    # A paused queue asks to be looked at again; without a schedule nothing would until the
    # next record arrives.
    assert looked_at_in_gap(None) == []
    ticks = sorted(set(looked_at_in_gap(5)))
    assert len(ticks) >= 3
    first_batch = min(b.time for b in kinesis_batches(records, 1000, 1.0))
    assert all((t - first_batch) % 5 == 0 for t in ticks)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"params": {"t9": 1}}, "unknown policy parameter"),
        ({"batching": {"batch_size": 0}}, "batch_size"),
        ({"queues": {"orders": {"mode": "sideways"}}}, "'mode' must be one of"),
        ({"queues": {"orders": {"concurrency": 1}}}, "'concurrency'"),
        ({"queues": {"orders": {"overrides": {"cmin": 500}}}}, "Cmin <= Cmax"),
        ({"colour": "blue"}, "unknown key"),
        ({"schedule_s": 0}, "'schedule_s'"),
        ({"algorithm": "magic"}, "'algorithm' must be one of"),
    ],
)
def test_bad_configs_are_rejected_by_name(raw: dict, message: str) -> None:
    with pytest.raises(Exception, match=message):
        parse_config(raw)


def test_a_bad_config_file_is_one_line(
    storm_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.json"
    config.write_text('{"batching": {"window_s": -1}}')
    assert main(["replay", str(storm_file), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "window_s" in err and "Traceback" not in err


# --- broken recordings ----------------------------------------------------------------------


def test_a_broken_line_is_one_error_naming_it(
    storm_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = storm_file.read_text().splitlines()
    lines[6] = lines[6][:40]
    storm_file.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(storm_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "line 7:" in err and "--skip-bad" in err


def test_skip_bad_replays_the_rest_and_counts_what_was_skipped(
    storm_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = storm_file.read_text().splitlines()
    total = len(lines)
    lines[6] = lines[6][:40]
    lines[9] = json.dumps({"arrival": "soon", "shard": "s", "sequence": "1", "data": ""})
    storm_file.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(storm_file), "--skip-bad", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)
    assert f"replayed {total - 2} records" in captured.err
    assert "2 broken line(s) skipped" in captured.err


def test_a_duplicated_record_is_left_out_and_counted(
    storm_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = _replay_json(storm_file, capsys)
    lines = storm_file.read_text().splitlines()
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("\n".join([*lines[:50], lines[40], *lines[50:]]) + "\n")
    assert main(["replay", str(doubled), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == original
    assert "1 duplicate record(s) left out" in captured.err


# --- batching -------------------------------------------------------------------------------


@st.composite
def recordings(draw: st.DrawFn) -> list[RecordedLine]:
    records = []
    for shard_index in range(draw(st.integers(1, 3))):
        now = START
        for sequence in range(1, draw(st.integers(0, 25)) + 1):
            now += draw(st.sampled_from([0.0, 0.1, 0.5, 0.99, 1.0, 1.5, 7.0]))
            shard = f"shardId-{shard_index:012d}"
            records.append(RecordedLine(now, shard, str(sequence), "k", b"%d" % sequence))
    return records


@settings(max_examples=80)
@given(
    records=recordings(),
    batch_size=st.integers(1, 6),
    window_s=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
)
def test_batches_are_what_a_kinesis_mapping_would_deliver(
    records: list[RecordedLine], batch_size: int, window_s: float
) -> None:
    batches = kinesis_batches(records, batch_size, window_s)
    delivered = [record for batch in batches for record in batch.records]
    assert sorted(delivered, key=id) == sorted(records, key=id)
    assert [b.time for b in batches] == sorted(b.time for b in batches)
    for batch in batches:
        assert 1 <= len(batch.records) <= batch_size
        assert {record.shard for record in batch.records} == {batch.shard}
        first = batch.records[0].arrival
        assert all(first <= r.arrival <= first + window_s for r in batch.records)
        assert batch.time >= max(r.arrival for r in batch.records)
    for shard in {record.shard for record in records}:
        in_order = [r for b in batches if b.shard == shard for r in b.records]
        assert [int(r.sequence) for r in in_order] == sorted(int(r.sequence) for r in in_order)


# --- against the local stack ----------------------------------------------------------------


def test_replay_against_the_local_stack_moves_its_mappings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from load.localfleet import build_fleet, client
    from stack.local.emulator import EmbeddedAws

    with EmbeddedAws() as aws:
        endpoint = aws.endpoint
        fleet = build_fleet(endpoint, ["orders"], register=True, suffix="-replay-test")
        target = ["--endpoint-url", endpoint, "--table", fleet.table]
        code = main(["replay", str(GOLDEN / "storm.jsonl"), "--json", "--changes", *target])
        captured = capsys.readouterr()
        lambda_api = client(endpoint, "lambda")
        mapping = lambda_api.get_event_source_mapping(UUID=fleet.mappings["orders"])
        trail = [
            item
            for item in client(endpoint, "dynamodb").scan(TableName=fleet.table)["Items"]
            if item["SK"]["S"].startswith("AUDIT#") and item["Action"]["S"] != "REGISTER"
        ]
    assert code == 0, captured.err
    decisions = json.loads(captured.out)
    # Only the registered queue is decided; billing's telemetry is counted and ignored.
    assert {d["queue"] for d in decisions} == {"orders"}
    assert "samples of unregistered queues ignored" in captured.err
    golden = [
        d
        for d in json.loads((GOLDEN / "storm.adaptive.decisions.json").read_text())
        if d["queue"] == "orders" and d["changed"]
    ]
    assert [(d["previous"], d["target"]) for d in decisions] == [
        (d["previous"], d["target"]) for d in golden
    ]
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == decisions[-1]["target"]
    # An audit item per change, and one per HOLD that changed the law's memory (a failed
    # test of Cmin lengthening the pause), at the same level.
    held = [item for item in trail if item["Action"]["S"] == "HOLD"]
    assert len(trail) - len(held) == len([d for d in decisions if d["action"] != "HOLD"])
    assert held and all(item["PreviousValue"] == item["NewValue"] for item in held)


@pytest.mark.parametrize("case", ["storm.adaptive", "capacity-drop.adaptive"])
def test_a_recording_of_the_reduced_stream_decides_as_the_telemetry_recording(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each telemetry record reduced (as a reducer reading one record at a time would put
    it), in the same shard, order and time: the controller reads it to the same decisions.
    A record with no telemetry (a plain log line, a control message) keeps its place as it
    was, so that the batches close at the same times."""
    from controller.reduce import reduce_samples
    from controller.telemetry import decode_record_data, reduced

    name = case.split(".")[0]
    reduced_lines = []
    for line in read_recording(GOLDEN / f"{name}.jsonl", skip_bad=False).records:
        seconds = reduce_samples(decode_record_data(line.data).samples)
        if not seconds:
            reduced_lines.append(
                RecordedLine(line.arrival, line.shard, line.sequence + "00", "", line.data)
            )
        for part, record in enumerate(reduced.encode(seconds, f"{line.shard}:{line.sequence}")):
            sequence = str(int(line.sequence) * 100 + part)
            reduced_lines.append(
                RecordedLine(line.arrival, line.shard, sequence, record.partition_key, record.data)
            )
    recording = tmp_path / f"{name}.reduced.jsonl"
    recording.write_text("".join(line.to_json() + "\n" for line in reduced_lines))
    _assert_replays_to_golden(recording, case, capsys)
