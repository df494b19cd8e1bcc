"""The decoder's shortcut past repeated metric declarations changes no outcome, whatever the
payload: it only saves parsing."""

from __future__ import annotations

import gzip
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.telemetry import TelemetryDecoder
from controller.telemetry.declarations import KnownDeclarations
from load.recording import subscription_payload
from worker import schema

TIMESTAMP_MS = 1_767_225_600_000
WORKER_DECLARATIONS = [{"Name": m.name, "Unit": m.unit} for m in schema.METRICS]


def worker_message(declarations: list[Any], **members: Any) -> str:
    document = {
        "_aws": {
            "Timestamp": TIMESTAMP_MS,
            "CloudWatchMetrics": [
                {
                    "Namespace": schema.NAMESPACE,
                    "Dimensions": [["QueueName"]],
                    "Metrics": declarations,
                }
            ],
        },
        "QueueName": "orders",
        "Downstream2xx": [3.0],
        **members,
    }
    return json.dumps(document, separators=(",", ":"))


def outcome(data: bytes, decoder: TelemetryDecoder) -> tuple[Any, ...]:
    result = decoder.decode_record_data(data, sequence_number="1")
    return (
        result.samples,
        dict(result.skipped),
        result.outcomes,
        result.log_events,
        result.payload_bytes,
    )


def without_shortcut() -> TelemetryDecoder:
    decoder = TelemetryDecoder()
    decoder.declarations.cut = lambda text: text  # type: ignore[method-assign]
    return decoder


names = st.text(st.sampled_from('ab]["\\{},:é \x00'), max_size=6)
flat_declarations = st.lists(
    st.fixed_dictionaries({"Name": names, "Unit": st.sampled_from(["Count", "Milliseconds"])}),
    max_size=3,
)
other_declarations = st.lists(
    st.one_of(st.integers(), st.text(max_size=3), st.just({"Name": {"nested": 1}}), st.none()),
    max_size=2,
)
raw_regions = st.sampled_from(
    ["", "1,", '{"Name":"a"', '{"Name":"a"}}', "x", '{"Name":"a\\\\"}', "[]", "]", '"a",{}']
)


@st.composite
def messages(draw: st.DrawFn) -> str:
    known = json.dumps(WORKER_DECLARATIONS, separators=(",", ":"))
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return worker_message(draw(st.one_of(flat_declarations, other_declarations)))
    if kind == 1:  # hand-written declarations, valid or not
        text = worker_message([])
        return text.replace('"Metrics":[]', f'"Metrics":[{draw(raw_regions)}]', 1)
    if kind == 2:  # the known declarations, then something broken or not after them
        text = worker_message(WORKER_DECLARATIONS)
        cut = draw(st.integers(0, len(text)))
        return text[:cut] + draw(st.sampled_from(["", "]", '"', "\\", "}"])) + text[cut:]
    if kind == 3:  # the known declarations where they are not declarations
        return worker_message([], note=f'"Metrics":{known}', **{"Metrics": json.loads(known)})
    return f'plain line "Metrics":{known}'


@settings(max_examples=300)
@given(
    st.lists(messages(), min_size=1, max_size=4),
    st.one_of(st.just("/aws/lambda/worker"), messages()),
    st.one_of(st.none(), st.integers(0, 2000)),
)
def test_the_shortcut_changes_no_outcome(
    lines: list[str], log_group: str, truncate_at: int | None
) -> None:
    data = subscription_payload([(TIMESTAMP_MS / 1000, line) for line in lines], log_group, "s")
    if truncate_at is not None:  # the payload's own JSON broken somewhere
        text = gzip.decompress(data)
        data = gzip.compress(text[:truncate_at] + text[truncate_at + 1 :], mtime=0)
    expected = outcome(data, without_shortcut())
    decoder = TelemetryDecoder()
    assert outcome(data, decoder) == expected  # cold: declarations learnt here
    assert outcome(data, decoder) == expected  # warm: declarations known


def test_repeated_worker_declarations_are_skipped() -> None:
    lines = [worker_message(WORKER_DECLARATIONS, Downstream429=[n]) for n in (1.0, 2.0)]
    text = gzip.decompress(subscription_payload([(1.0, line) for line in lines], "g", "s"))
    shortened = KnownDeclarations().cut(text.decode())
    messages = [e["message"] for e in json.loads(shortened)["logEvents"]]
    assert [json.loads(m)["_aws"]["CloudWatchMetrics"][0]["Metrics"] for m in messages] == [[], []]
    assert [json.loads(m)["Downstream429"] for m in messages] == [[1.0], [2.0]]
    assert len(shortened) < len(text) - len(json.dumps(WORKER_DECLARATIONS))
