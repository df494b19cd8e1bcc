"""Fuzzing in the normal suite: hypothesis over the handler's event shapes, and a short run of
the generator that ``make fuzz`` runs 100,000 times (load/fuzz.py)."""

from __future__ import annotations

import base64
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from load import fuzz
from tests.strategies import json_values

FAST = settings(max_examples=150)

records = st.lists(
    json_values
    | st.fixed_dictionaries(
        {"kinesis": json_values | st.fixed_dictionaries({"data": json_values})},
        optional={"eventID": json_values},
    )
    | st.fixed_dictionaries(
        {
            "kinesis": st.fixed_dictionaries(
                {"data": st.binary(max_size=60).map(base64.b64encode).map(bytes.decode)},
                optional={"sequenceNumber": json_values | st.integers().map(str)},
            )
        }
    ),
    max_size=5,
)


@FAST
@given(json_values | records)
def test_the_handler_never_raises_on_any_records_shape(records: Any) -> None:
    app, actuator = fuzz.fresh_app()
    response = app.handle({"Records": records}, None)
    assert isinstance(response["batchItemFailures"], list)
    assert actuator.calls == []


@FAST
@given(st.randoms(use_true_random=False))
def test_generated_events_never_raise_in_the_decoder_or_the_handler(rng: random.Random) -> None:
    app, actuator = fuzz.fresh_app()
    for index in range(3):
        event = fuzz.fuzz_event(rng, first_sequence=index * 10)
        fuzz.check_decoder(event)
        fuzz.check_handler(app, actuator, event)


def test_a_short_fuzz_run_counts_its_inputs_and_finds_nothing() -> None:
    report = fuzz.run(inputs=400, seed=7)
    assert report.failures == []
    assert (report.inputs, report.decoded, report.handled) == (400, 400, 100)
    assert "400 generated inputs" in report.summary(7)
