"""The zero-code wrapper: an unchanged application, counted from outside, read by the controller."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import urllib3

from controller.telemetry import samples_from_log_message
from tests.paths import ROOT
from tests.worker_support import (  # noqa: F401 (fixtures)
    by_queue,
    decoded,
    downstream,
    instrumentation,
    load_event,
    worker_output,
)
from worker import instrument, wrapper
from worker.example import app
from worker.invocation import failures, queue_from_arn
from worker.tally import Tally

pytestmark = pytest.mark.usefixtures("instrumentation")

REPO_ROOT = ROOT


@pytest.fixture
def wrapped_example(
    monkeypatch: pytest.MonkeyPatch,
    downstream: str,  # noqa: F811
    instrumentation: None,  # noqa: F811 (first: it clears the QueueMesh environment)
) -> str:
    monkeypatch.setenv("QUEUEMESH_HANDLER", "worker.example.app.handler")
    monkeypatch.setenv("DOWNSTREAM_URL", f"{downstream}/orders")
    monkeypatch.setattr(wrapper, "_app_handler", None)
    return downstream


def _ids_with(event: dict[str, Any], status: int) -> list[str]:
    return [
        record["messageId"]
        for record in event["Records"]
        if json.loads(record["body"])["status"] == status
    ]


def test_the_document_decodes_to_exactly_the_answers_the_downstream_gave(
    wrapped_example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    event = load_event("sqs_mixed_answers.json")
    failed = sorted(_ids_with(event, 429) + _ids_with(event, 503))

    response = wrapper.handler(event, None)

    assert sorted(item["itemIdentifier"] for item in response["batchItemFailures"]) == failed
    (sample,) = decoded(worker_output(capsys))
    assert sample.queue == "orders"
    port = wrapped_example.rsplit(":", 1)[1]
    assert sample.downstream == f"127.0.0.1:{port}"
    assert (sample.requests, sample.ok, sample.throttled, sample.server_errors) == (6, 3, 2, 1)
    assert (sample.overloaded, sample.client_errors) == (1, 0)
    assert sample.latency_count == 6
    assert sample.latency_ms_sum > 0
    assert sample.retry_after_s == 7
    assert sample.invocation_ms is not None
    assert sample.invocation_ms * 1000 >= sample.latency_ms_sum


def test_the_wrapped_application_answers_as_it_does_unwrapped(
    wrapped_example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    unwrapped = app.handler(load_event("sqs_mixed_answers.json"), None)
    wrapped = wrapper.handler(load_event("sqs_mixed_answers.json"), None)

    assert wrapped == unwrapped
    assert len(decoded(worker_output(capsys))) == 1


def test_return_value_passes_through_as_the_same_object(
    capsys: pytest.CaptureFixture[str],
) -> None:
    answer = {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}], "extra": [1, 2]}
    seen: list[Any] = []

    def application(event: Any, context: Any) -> Any:
        seen.append((event, context))
        return answer

    event = load_event("sqs_mixed_answers.json")
    context = object()
    assert wrapper.invoke(application, event, context) is answer
    assert seen == [(event, context)]
    assert answer == {
        "batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}],
        "extra": [1, 2],
    }
    (sample,) = decoded(worker_output(capsys))
    assert sample.requests == 0


def test_exceptions_pass_through_unchanged_and_the_invocation_is_still_reported(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    failure = RuntimeError("the application's own failure")
    pool = urllib3.PoolManager(retries=False)

    def application(event: Any, context: Any) -> Any:
        pool.request("GET", f"{downstream}/status/503")
        raise failure

    with pytest.raises(RuntimeError) as raised:
        wrapper.invoke(application, load_event("sqs_mixed_answers.json"), None)

    assert raised.value is failure
    (sample,) = decoded(worker_output(capsys))
    assert (sample.requests, sample.server_errors, sample.overloaded) == (1, 1, 1)
    assert instrument.active() is None


def test_events_without_sqs_records_are_passed_through_and_not_reported(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    pool = urllib3.PoolManager(retries=False)

    def application(event: Any, context: Any) -> Any:
        return pool.request("GET", f"{downstream}/status/200").status

    assert wrapper.invoke(application, {"detail-type": "Scheduled Event"}, None) == 200
    assert wrapper.invoke(application, [1, 2], None) == 200
    assert worker_output(capsys) == ""


def test_calls_follow_the_record_being_processed_across_queues(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    pool = urllib3.PoolManager(retries=False)

    def application(event: Any, context: Any) -> Any:
        for record in event["Records"]:
            pool.request("POST", downstream, body=record["body"])
        return {"batchItemFailures": []}

    samples = by_queue(decoded_after(application, "sqs_two_queues.json", capsys))

    assert set(samples) == {"orders", "refunds"}
    orders, refunds = samples["orders"], samples["refunds"]
    assert (orders.requests, orders.ok, orders.server_errors, orders.throttled) == (3, 2, 1, 0)
    assert (refunds.requests, refunds.ok, refunds.throttled, refunds.retry_after_s) == (2, 1, 1, 3)
    assert orders.invocation_ms == refunds.invocation_ms


def test_calls_fanned_out_to_threads_go_to_the_queue_with_most_records(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    pool = urllib3.PoolManager(retries=False, maxsize=5)

    def application(event: Any, context: Any) -> Any:
        bodies = [record["body"] for record in event["Records"]]
        threads = [
            threading.Thread(target=pool.request, args=("POST", downstream), kwargs={"body": body})
            for body in bodies
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return None

    samples = by_queue(decoded_after(application, "sqs_two_queues.json", capsys))

    assert (samples["orders"].requests, samples["orders"].ok) == (5, 3)
    assert (samples["orders"].throttled, samples["orders"].server_errors) == (1, 1)
    assert samples["refunds"].requests == 0


def decoded_after(
    application: Any, event_name: str, capsys: pytest.CaptureFixture[str]
) -> list[Any]:
    wrapper.invoke(application, load_event(event_name), None)
    return decoded(worker_output(capsys))


def test_namespace_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QUEUEMESH_NAMESPACE", "Payments")
    wrapper.invoke(lambda event, context: None, load_event("sqs_mixed_answers.json"), None)
    printed = worker_output(capsys)
    (sample,) = decoded(printed, namespace="Payments")
    assert sample.queue == "orders"
    assert samples_from_log_message(printed.strip(), None) == []  # not in the default namespace


def test_powertools_switches_for_application_metrics_do_not_silence_the_control_signal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "orders-worker")
    wrapper.invoke(lambda event, context: None, load_event("sqs_mixed_answers.json"), None)
    printed = worker_output(capsys)
    (sample,) = decoded(printed)
    assert sample.queue == "orders"
    directives = json.loads(printed)["_aws"]["CloudWatchMetrics"]
    assert directives[0]["Dimensions"] == [["QueueName"]]


def test_instrumentation_failures_are_swallowed_counted_and_logged_once(
    monkeypatch: pytest.MonkeyPatch,
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_add(self: Tally, *args: Any) -> None:
        raise ValueError("instrumentation bug")

    monkeypatch.setattr(Tally, "add", broken_add)
    pool = urllib3.PoolManager(retries=False)

    def application(event: Any, context: Any) -> Any:
        return [pool.request("GET", f"{downstream}/status/{code}").status for code in (200, 429)]

    printed = []
    with caplog.at_level(logging.WARNING, logger="queuemesh"):
        for _ in range(2):
            assert wrapper.invoke(application, load_event("sqs_mixed_answers.json"), None) == [
                200,
                429,
            ]
            printed.append(worker_output(capsys))

    assert failures.count == 4
    assert len([r for r in caplog.records if "instrumentation failed" in r.getMessage()]) == 1
    documents = [json.loads(line) for line in "".join(printed).splitlines()]
    assert [document["QueueMeshInstrumentationErrors"] for document in documents] == [2, 4]


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("handler", "is not module.function"),
        ("no_such_module_qm.handler", "no module named 'no_such_module_qm'"),
        ("worker.example.app.no_such_function", "has no function 'no_such_function'"),
        ("worker.example.app.http", "has no function 'http'"),
        ("worker.wrapper.handler", "the QueueMesh wrapper itself"),
    ],
)
def test_a_handler_name_that_does_not_resolve_fails_with_one_clear_line(
    spec: str | None, names: str
) -> None:
    with pytest.raises(wrapper.HandlerNotFoundError) as raised:
        wrapper.load_handler(spec)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("QUEUEMESH_HANDLER")
    assert names in message


def test_handler_names_in_lambda_path_form_resolve() -> None:
    assert wrapper.load_handler("worker/example/app.handler") is app.handler


def test_the_applications_own_import_errors_are_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "qm_app_missing_dep.py").write_text("import qm_dependency_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as raised:
        wrapper.load_handler("qm_app_missing_dep.handler")
    assert raised.value.name == "qm_dependency_not_installed"


def test_the_handler_is_loaded_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "qm_counting_app.py").write_text(
        textwrap.dedent(
            """
            imports = 0
            imports += 1

            def handler(event, context):
                return imports
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("QUEUEMESH_HANDLER", "qm_counting_app.handler")
    monkeypatch.setattr(wrapper, "_app_handler", None)
    loads: list[str | None] = []
    real_load = wrapper.load_handler

    def counting_load(spec: str | None) -> wrapper.Handler:
        loads.append(spec)
        return real_load(spec)

    monkeypatch.setattr(wrapper, "load_handler", counting_load)
    assert [wrapper.handler({}, None) for _ in range(3)] == [1, 1, 1]
    assert loads == ["qm_counting_app.handler"]


def test_in_lambda_a_bad_handler_name_fails_the_init_with_one_line() -> None:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("QUEUEMESH_", "AWS_"))
    }
    environment.update(
        AWS_LAMBDA_RUNTIME_API="127.0.0.1:9", QUEUEMESH_HANDLER="app.handlr", PYTHONPATH=""
    )
    completed = subprocess.run(
        [sys.executable, "-c", "import worker.wrapper"],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode != 0
    last_line = completed.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        "worker.wrapper.HandlerNotFoundError: QUEUEMESH_HANDLER='app.handlr'"
    )


def test_powertools_readers_see_the_same_records_and_attribution_follows_them(
    downstream: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    from aws_lambda_powertools.utilities.data_classes import SQSEvent
    from aws_lambda_powertools.utilities.parser import parse
    from aws_lambda_powertools.utilities.parser.models import SqsModel

    pool = urllib3.PoolManager(retries=False)
    parsed: list[int] = []

    def application(event: Any, context: Any) -> Any:
        parsed.append(len(parse(event=event, model=SqsModel).Records))
        for record in SQSEvent(event).records:
            pool.request("POST", downstream, body=record.body)
        return json.loads(json.dumps(event))["Records"][0]["messageId"]

    event = load_event("sqs_two_queues.json")
    first_id = event["Records"][0]["messageId"]
    assert wrapper.invoke(application, event, None) == first_id
    assert parsed == [5]
    samples = by_queue(decoded(worker_output(capsys)))
    assert (samples["orders"].requests, samples["refunds"].requests) == (3, 2)
    assert samples["refunds"].throttled == 1


@pytest.mark.parametrize(
    ("arn", "queue"),
    [
        ("arn:aws:sqs:us-east-1:123456789012:orders", "orders"),
        ("arn:aws-cn:sqs:cn-north-1:123456789012:orders.fifo", "orders.fifo"),
        ("arn:aws:kinesis:us-east-1:123456789012:stream/telemetry", None),
        ("arn:aws:sqs:us-east-1:123456789012:", None),
        ("orders", None),
        (None, None),
    ],
)
def test_the_queue_is_the_last_segment_of_an_sqs_arn(arn: object, queue: str | None) -> None:
    assert queue_from_arn(arn) == queue


def test_records_from_other_event_sources_are_not_queues(
    capsys: pytest.CaptureFixture[str],
) -> None:
    event = load_event("sqs_mixed_answers.json")
    for record in event["Records"]:
        record["eventSource"] = "aws:kinesis"
        record["eventSourceARN"] = "arn:aws:kinesis:us-east-1:123456789012:stream/telemetry"
    assert wrapper.invoke(lambda event, context: "ok", event, None) == "ok"
    assert worker_output(capsys) == ""


def test_sigterm_flushes_what_the_environment_holds_then_stops_the_process() -> None:
    """Lambda sends SIGTERM before it shuts an execution environment down (with an extension):
    the reports still held are printed, then the process ends as SIGTERM ends it."""
    script = (
        "import os, signal, time\n"
        "from worker import wrapper\n"
        "from worker.tally import Tally\n"
        "wrapper._flush_on_sigterm()\n"
        "tally = Tally()\n"
        "tally.add(200, 12.0, None, 'api.example.com')\n"
        # The first is written at once; the second, 100 ms after it, is held for its second.
        "second = int(time.time())\n"
        "wrapper._emit(wrapper._reports.ended({'orders': tally}, 100.0, second + 0.1))\n"
        "wrapper._emit(wrapper._reports.ended({'orders': tally}, 100.0, second + 0.3))\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(5)\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == -signal.SIGTERM
    before, after = finished.stdout.split("held\n")
    assert len(decoded(before)) == 1
    samples = decoded(before + after)
    assert sum(sample.invocations for sample in samples) == 2
    assert sum(sample.ok for sample in samples) == 2
