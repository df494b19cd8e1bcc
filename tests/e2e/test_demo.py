from __future__ import annotations

import json
import multiprocessing
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from stack.cli import main

SHORT_SCENARIO = {
    "name": "demo-test",
    "duration_s": 50,
    "seed": 1,
    "telemetry_delay_s": [1, 2],
    "downstreams": [
        {"name": "payments", "capacity_rps": [[0, 100], [8, 25], [24, 100]], "latency_ms": 200}
    ],
    "queues": [
        {
            "name": "orders",
            "downstream": "payments",
            "backlog": 600,
            "arrivals_rps": [[0, 30], [45, 0]],
            "batch_size": 10,
            "visibility_timeout_s": 10,
            "max_receive_count": 5,
            "max_concurrency": 12,
            "min_concurrency": 2,
        }
    ],
}


def refuses(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.timeout(280)
def test_demo_storm_and_cure_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "demo-test.json"
    scenario.write_text(json.dumps(SHORT_SCENARIO))
    plot = tmp_path / "demo.png"
    recording = tmp_path / "telemetry.jsonl"
    threads_before = set(threading.enumerate())

    code = main(
        [
            "demo",
            "--headless",
            "--json",
            "--scenario",
            str(scenario),
            "--plot",
            str(plot),
            "--record",
            str(recording),
        ]
    )

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    score = result["queues"]["orders"]
    transitions = result["transitions"]
    cuts = [t for t in transitions if t["target"] < t["previous"]]
    raises = [t for t in transitions if t["target"] > t["previous"]]
    # Concurrency falls after the drop (t=8) and rises after the return (t=24).
    assert any(8 <= cut["t"] < 24 for cut in cuts), transitions
    assert any(rise["t"] >= 24 for rise in raises), transitions
    assert score["esm_updates"] == len(cuts) + len(raises) >= 2
    assert result["ledger"]["orders"]["version"] == len(transitions)
    assert result["ledger"]["orders"]["concurrency"] == transitions[-1]["target"]
    assert score["detection_latency_s"] is not None and score["detection_latency_s"] >= 0
    # The storm happened (the downstream rejected calls) and every message is accounted for.
    assert 0 < score["calls_rejected"] < score["calls_total"]
    assert score["messages_total"] == 600 + 30 * 45
    assert score["messages_pending"] == 0
    assert score["messages_done"] + score["dlq_messages"] == score["messages_total"]
    assert score["drain_s"] is not None
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    assert lines and all(
        set(line) == {"arrival", "shard", "sequence", "partition_key", "data"} for line in lines
    )
    sequences = [int(line["sequence"]) for line in lines]
    assert sequences == sorted(sequences)
    # Nothing is left behind: no thread, no container process, no listening port.
    deadline = time.monotonic() + 10
    while True:
        leftover = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        if not leftover or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert leftover == []
    assert multiprocessing.active_children() == []
    assert refuses(result["aws"]) and refuses(result["downstream"])
