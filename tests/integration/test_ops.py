"""Fleet operations against moto's server: register, status, audit, pin, unpin, mode."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.actuator import LambdaActuator
from controller.app import ControllerApp
from controller.ledger import DynamoLedger
from controller.loop import ControlLoop
from controller.model import AuditEntry, AuditEvent, GroupReport, GroupShare, Mode
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from load.localfleet import LocalFleet, build_fleet, client
from stack.cli import main
from stack.local.emulator import EmbeddedAws
from stack.ops.commands import parse_since
from tests.factories import sample


@pytest.fixture(scope="module")
def aws() -> Iterator[EmbeddedAws]:
    with EmbeddedAws() as emulator:
        yield emulator


@pytest.fixture
def fleet(aws: EmbeddedAws) -> Iterator[LocalFleet]:
    """Queues orders and billing with mappings at 100, nothing registered yet."""
    try:
        suffix = f"-{uuid.uuid4().hex[:8]}"
        yield build_fleet(aws.endpoint, ["orders", "billing"], register=False, suffix=suffix)
    finally:
        aws.reset()  # leave nothing behind for the next test


class Cli:
    def __init__(self, fleet: LocalFleet, capsys: pytest.CaptureFixture[str]) -> None:
        self.fleet = fleet
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        target = ["--table", self.fleet.table, "--endpoint-url", self.fleet.endpoint]
        try:
            code = main([*argv, *target])
        except SystemExit as exit_:  # argparse's own usage errors
            code = int(exit_.code or 0)
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, err
        return out

    def one_line_error(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 2
        assert out == ""
        assert err.count("\n") == 1 and "Traceback" not in err
        return err


@pytest.fixture
def cli(fleet: LocalFleet, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(fleet, capsys)


def _mapping(fleet: LocalFleet, queue: str) -> dict:
    config = client(fleet.endpoint, "lambda").get_event_source_mapping(UUID=fleet.mappings[queue])
    return dict(config)


def _ledger(fleet: LocalFleet) -> DynamoLedger:
    return DynamoLedger(fleet.table, client(fleet.endpoint, "dynamodb"), memory_types=memory_type)


def test_register_checks_the_mapping_and_writes_config_state_and_audit(
    cli: Cli, fleet: LocalFleet
) -> None:
    out = cli.ok("register", "orders", "--esm", fleet.mappings["orders"], "--t1", "0.1")
    assert "registered orders" in out and "MaximumConcurrency 100" in out
    ledger = _ledger(fleet)
    config = ledger.get_configs(["orders"])["orders"]
    assert (config.esm_uuid, config.mode, config.overrides) == (
        fleet.mappings["orders"],
        Mode.ACTIVE,
        {"t1": 0.1},
    )
    assert ledger.get_states(["orders"])["orders"].concurrency == 100
    [entry] = ledger.audit_trail("orders")
    assert entry.action == "REGISTER" and entry.event_type.value == "OPERATOR"


def test_register_gives_an_uncapped_mapping_its_cmax(cli: Cli, fleet: LocalFleet) -> None:
    lambda_api = client(fleet.endpoint, "lambda")
    sqs = client(fleet.endpoint, "sqs")
    url = sqs.create_queue(QueueName="uncapped")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    created = lambda_api.create_event_source_mapping(
        EventSourceArn=arn, FunctionName=fleet.function
    )
    esm = created["UUID"]
    assert "MaximumConcurrency" not in (created.get("ScalingConfig") or {})
    out = cli.ok("register", "uncapped", "--esm", esm, "--cmax", "40")
    assert "MaximumConcurrency 40" in out
    mapping = lambda_api.get_event_source_mapping(UUID=esm)
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == 40
    [entry] = _ledger(fleet).audit_trail("uncapped")
    assert "was unset; set to 40" in entry.reason
    assert _ledger(fleet).get_states(["uncapped"])["uncapped"].concurrency == 40


def test_register_refuses_a_mapping_of_another_queue(cli: Cli, fleet: LocalFleet) -> None:
    err = cli.one_line_error("register", "orders", "--esm", fleet.mappings["billing"])
    assert "reads from arn:aws:sqs:" in err and ":billing" in err and "'orders'" in err
    assert _ledger(fleet).get_configs(["orders"]) == {}


def test_register_refuses_a_missing_mapping(cli: Cli) -> None:
    err = cli.one_line_error("register", "orders", "--esm", "00000000-0000-4000-8000-00000000dead")
    assert "not found" in err


def test_register_refuses_an_unknown_mode(cli: Cli, fleet: LocalFleet) -> None:
    err = cli.one_line_error("register", "orders", "--esm", fleet.mappings["orders"], "--mode", "x")
    assert "mode must be one of" in err
    assert _ledger(fleet).get_configs(["orders"]) == {}


def test_register_refuses_a_policy_that_does_not_hold(cli: Cli, fleet: LocalFleet) -> None:
    err = cli.one_line_error(
        "register", "orders", "--esm", fleet.mappings["orders"], "--cmin", "500"
    )
    assert "Cmin <= Cmax" in err


def test_status_lists_every_managed_queue(cli: Cli, fleet: LocalFleet) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    cli.ok("register", "billing", "--esm", fleet.mappings["billing"], "--mode", "dry-run")
    rows = json.loads(cli.ok("status", "--json"))
    assert [(r["queue"], r["mode"], r["state"], r["concurrency"]) for r in rows] == [
        ("billing", "DRY_RUN", "HEALTHY", 100),
        ("orders", "ACTIVE", "HEALTHY", 100),
    ]
    assert all(r["last_reason"].startswith("Registered by operator") for r in rows)
    table = cli.ok("status").splitlines()
    assert table[0].split()[:5] == ["queue", "mode", "state", "concurrency", "pressure"]
    assert len(table) == 3


def test_status_shows_when_a_paused_queue_is_looked_at_again(cli: Cli, fleet: LocalFleet) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    ledger = _ledger(fleet)
    registered = ledger.get_states(["orders"])["orders"]
    wake_at = 1_790_000_000.0
    paused = registered.evolve(
        enabled=False, concurrency=2, paused_since=wake_at - 15, wake_at=wake_at
    )
    reason = "Overload at Cmin; pausing the mapping for 15s."
    ledger.commit(
        paused,
        AuditEntry("orders", wake_at - 15, AuditEvent.TRANSITION, 100, 2, "DECREASE", reason),
    )
    [row] = json.loads(cli.ok("status", "--json"))
    assert (row["concurrency"], row["enabled"], row["wake_at"]) == (
        2,
        False,
        "2026-09-21T14:13:20Z",
    )
    assert "2 (paused until 2026-09-21T14:13:20Z)" in cli.ok("status")


def test_register_puts_the_queue_in_its_group_and_pin_and_mode_keep_it(
    cli: Cli, fleet: LocalFleet
) -> None:
    out = cli.ok(
        "register", "orders", "--esm", fleet.mappings["orders"], "--group", "payments",
        "--weight", "2.5", "--priority", "7",
    )  # fmt: skip
    assert "group payments" in out
    ledger = _ledger(fleet)

    def standing() -> tuple[str | None, float, int]:
        config = ledger.get_configs(["orders"])["orders"]
        return config.group, config.weight, config.priority

    assert standing() == ("payments", 2.5, 7)
    assert "group payments, weight 2.5, priority 7" in ledger.audit_trail("orders")[-1].reason
    cli.ok("pin", "orders", "10")
    assert standing() == ("payments", 2.5, 7)
    cli.ok("mode", "orders", "dry-run")
    assert standing() == ("payments", 2.5, 7)


def test_status_shows_each_groups_capacity_shares_and_pauses(cli: Cli, fleet: LocalFleet) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"], "--group", "payments")
    cli.ok("register", "billing", "--esm", fleet.mappings["billing"], "--group", "payments")
    members = (GroupShare("orders", 60.0, 12), GroupShare("billing", 20.0, 4, paused=True))
    _ledger(fleet).put_group_report(GroupReport("payments", 1_790_000_000.0, 80.0, members))
    rows = {row["queue"]: row["group"] for row in json.loads(cli.ok("status", "--json"))}
    assert rows == {
        "orders": {
            "name": "payments",
            "capacity_rps": 80.0,
            "share_rps": 60.0,
            "level": 12,
            "paused_to_share": False,
            "decided_at": "2026-09-21T14:13:20Z",
        },
        "billing": {
            "name": "payments",
            "capacity_rps": 80.0,
            "share_rps": 20.0,
            "level": 4,
            "paused_to_share": True,
            "decided_at": "2026-09-21T14:13:20Z",
        },
    }
    text = cli.ok("status").split("\n\n")
    assert len(text) == 2
    group = text[1].splitlines()
    assert group[0] == "group payments: capacity 80.0 calls/s (decided 2026-09-21T14:13:20Z)"
    assert [line.split() for line in group[2:]] == [
        ["orders", "60.0", "12", "no"],
        ["billing", "20.0", "4", "yes"],
    ]


def test_pin_moves_the_mapping_and_the_controller_holds_it(cli: Cli, fleet: LocalFleet) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    out = cli.ok("pin", "orders", "10")
    assert "pinned orders at 10 (was 100)" in out
    assert _mapping(fleet, "orders")["ScalingConfig"]["MaximumConcurrency"] == 10
    ledger = _ledger(fleet)
    config = ledger.get_configs(["orders"])["orders"]
    assert (config.mode, config.pinned_concurrency) == (Mode.PINNED, 10)
    pin_entry = ledger.audit_trail("orders")[-1]
    assert (pin_entry.action, pin_entry.previous_value, pin_entry.new_value) == ("PIN", 100, 10)

    # A storm on a pinned queue: the real controller, on this ledger and mapping, holds.
    controller = ControlLoop(
        ledger,
        LambdaActuator(client(fleet.endpoint, "lambda")),
        PolicyParams(min_samples=5),
        algorithm=Aimd(),
    )
    storm = [sample("orders", at=pin_entry.timestamp + 5 + i, ok=5, throttled=5) for i in range(5)]
    [decision] = controller.run_batch(storm, pin_entry.timestamp + 10, math.inf).done
    assert decision.target == 10 and "Pinned by operator" in decision.reason
    assert _mapping(fleet, "orders")["ScalingConfig"]["MaximumConcurrency"] == 10

    out = cli.ok("unpin", "orders")
    assert "unpinned orders" in out
    config = ledger.get_configs(["orders"])["orders"]
    assert (config.mode, config.pinned_concurrency) == (Mode.ACTIVE, None)
    assert ledger.audit_trail("orders")[-1].action == "UNPIN"

    # Unpinned, the next storm is cut from the pinned value (by the original rule: halved).
    controller = ControlLoop(
        ledger,
        LambdaActuator(client(fleet.endpoint, "lambda")),
        PolicyParams(min_samples=5),
        algorithm=Aimd(),
    )
    later = ledger.audit_trail("orders")[-1].timestamp + 10
    storm = [sample("orders", at=later + i, ok=5, throttled=5) for i in range(5)]
    [decision] = controller.run_batch(storm, later + 5, math.inf).done
    assert (decision.previous, decision.target) == (10, 5)
    assert _mapping(fleet, "orders")["ScalingConfig"]["MaximumConcurrency"] == 5


@pytest.mark.parametrize("value", ["1", "1001", "ten"])
def test_pin_out_of_range_is_one_line(cli: Cli, fleet: LocalFleet, value: str) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    err = cli.one_line_error("pin", "orders", value)
    assert "N must be" in err
    assert _mapping(fleet, "orders")["ScalingConfig"]["MaximumConcurrency"] == 100


def test_mode_switches_between_active_and_dry_run(cli: Cli, fleet: LocalFleet) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    assert "ACTIVE -> DRY_RUN" in cli.ok("mode", "orders", "dry-run")
    assert _ledger(fleet).get_configs(["orders"])["orders"].mode is Mode.DRY_RUN
    assert "DRY_RUN -> ACTIVE" in cli.ok("mode", "orders", "active")
    actions = [entry.action for entry in _ledger(fleet).audit_trail("orders")]
    assert actions == ["REGISTER", "MODE", "MODE"]
    err = cli.one_line_error("mode", "orders", "pinned")
    assert "mode must be one of active, dry-run" in err and "queuemesh pin" in err


def test_audit_lists_entries_since_a_time(cli: Cli, fleet: LocalFleet) -> None:
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    cli.ok("pin", "orders", "20")
    entries = json.loads(cli.ok("audit", "orders", "--json", "--since", "1h"))
    assert [(e["action"], e["previous"], e["new"]) for e in entries] == [
        ("REGISTER", 100, 100),
        ("PIN", 100, 20),
    ]
    assert all(e["event_type"] == "OPERATOR" for e in entries)
    assert "in the future" in cli.one_line_error("audit", "orders", "--since", "2999-01-01")
    table = cli.ok("audit", "orders").splitlines()
    assert table[0].split()[:3] == ["time", "event", "action"] and len(table) == 3
    assert "neither ISO-8601" in cli.one_line_error("audit", "orders", "--since", "yesterday")


@pytest.mark.parametrize(
    "argv",
    [("pin", "ghost", "10"), ("unpin", "ghost"), ("mode", "ghost", "active"), ("audit", "ghost")],
)
def test_an_unknown_queue_is_one_line(cli: Cli, argv: tuple[str, ...]) -> None:
    assert "queue 'ghost' is not registered" in cli.one_line_error(*argv)


def test_a_missing_table_is_one_line(fleet: LocalFleet, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--table", "nope", "--endpoint-url", fleet.endpoint])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "ledger table 'nope' not found" in err


def test_no_table_named_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("QUEUEMESH_TABLE", raising=False)
    assert main(["status", "--endpoint-url", "http://127.0.0.1:9"]) == 2
    assert "pass --table or set QUEUEMESH_TABLE" in capsys.readouterr().err


def test_an_unreachable_endpoint_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--table", "t", "--endpoint-url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach http://127.0.0.1:9" in err


def test_no_credentials_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert main(["status", "--table", "t", "--region", "eu-west-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no usable AWS credentials" in err


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("30m", 10_000.0 - 1800),
        ("1h", 10_000.0 - 3600),
        ("90s", 10_000.0 - 90),
        ("1970-01-01T01:00:00Z", 3600.0),
        ("1970-01-01T01:00:00", 3600.0),
        ("1970-01-01T02:00:00+01:00", 3600.0),
    ],
)
def test_since_accepts_relative_and_iso_times(raw: str, expected: float) -> None:
    assert parse_since(raw, now=10_000.0) == expected


def test_a_newly_registered_queue_is_left_to_its_telemetry(cli: Cli, fleet: LocalFleet) -> None:
    """Registration asks for no wake-up: the scheduled tick does not read the queue (its
    telemetry decides it), and the mapping stays at its cap (no cut without pressure: the
    poller's own ramp is what a healthy queue needs)."""
    cli.ok("register", "orders", "--esm", fleet.mappings["orders"])
    ledger = _ledger(fleet)
    before = _mapping(fleet, "orders")["ScalingConfig"]["MaximumConcurrency"]
    app = ControllerApp(
        ControlLoop(ledger, LambdaActuator(client(fleet.endpoint, "lambda")), PolicyParams())
    )
    assert ledger.due_states(time.time() + 86_400.0) == []
    assert app.handle({"detail-type": "Scheduled Event"}, None) == {"due": 0, "decided": 0}
    assert _mapping(fleet, "orders")["ScalingConfig"]["MaximumConcurrency"] == before
