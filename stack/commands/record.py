"""`queuemesh record`: copy a Kinesis stream's records to a recording (see ``load.record``)."""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Any

from load.progress import Progress
from load.record import Recorder, RecordError, error_code
from stack.errors import CliError, quoted

# Kinesis' StreamName pattern and length.
_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from stack.aws import add_target_arguments

    parser = subparsers.add_parser(
        "record",
        help="record a Kinesis telemetry stream to a JSON Lines file",
        description=(
            "Read every shard of a Kinesis stream and write its records, in arrival order, "
            "as JSON Lines (the recording format `queuemesh replay` reads). Stops after "
            "--duration, --max-records, or on Ctrl-C; what was read is always kept."
        ),
    )
    parser.add_argument("--stream", required=True, type=_stream_name, help="Kinesis stream name")
    parser.add_argument("--out", required=True, help="recording file to write (JSON Lines)")
    parser.add_argument(
        "--duration", type=_positive_seconds, help="stop after this many seconds (default: Ctrl-C)"
    )
    parser.add_argument(
        "--from-start",
        action="store_true",
        help="start at the oldest record the stream holds (TRIM_HORIZON); default: new records "
        "only (LATEST)",
    )
    parser.add_argument("--max-records", type=_positive_int, help="stop after this many records")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    add_target_arguments(parser)
    parser.set_defaults(func=run)


def _stream_name(raw: str) -> str:
    if not _STREAM_NAME.fullmatch(raw):
        raise argparse.ArgumentTypeError(
            f"{quoted(raw)} is not a Kinesis stream name (1-128 letters, digits, '_', '-', '.')"
        )
    return raw


def _positive_seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {raw!r}") from error
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {raw!r}")
    return value


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from error
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {raw!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from stack.aws import AwsTarget, aws_errors

    target = AwsTarget.from_args(args)
    with aws_errors(target):
        kinesis = target.client("kinesis")
        _check_stream(kinesis, args.stream, target.describe())
        try:
            out = open(args.out, "w", encoding="utf-8")  # noqa: SIM115 - closed in finally
        except OSError as error:
            raise CliError(f"cannot write {args.out}: {error.strerror}") from error
        try:
            with Progress.for_command("record") as progress:
                recorder = Recorder(
                    kinesis,
                    args.stream,
                    out,
                    from_start=args.from_start,
                    duration_s=args.duration,
                    max_records=args.max_records,
                    progress=None if args.quiet else progress.update,
                )
                totals = recorder.run()
        except RecordError as error:
            raise CliError(str(error)) from error
        finally:
            out.close()
    if not args.quiet:
        print(f"recorded {totals.line()} to {args.out} ({totals.stopped_by})", file=sys.stderr)
    return 0


def _check_stream(kinesis: Any, stream: str, where: str) -> None:
    try:
        kinesis.describe_stream_summary(StreamName=stream)
    except Exception as error:
        if error_code(error) == "ResourceNotFoundException":
            raise CliError(
                f"stream {stream!r} not found at {where}; check --stream, --region and "
                "--endpoint-url"
            ) from error
        raise
