"""`queuemesh doctor`: checks a deployed stack (``stack.doctor``) and prints one line per
problem with its fix; ``--fix`` backfills the WakeUp of paused STATE items."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from stack.aws import AwsTarget, add_stack_arguments, add_target_arguments, aws_errors
from stack.errors import CliError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help_text = "check a deployed stack for misconfigurations, each with its fix"
    parser = subparsers.add_parser(
        "doctor",
        help=help_text,
        description=(
            f"{help_text}. Exit status 1 when there is a problem (a note alone does not "
            "count), 0 when the stack is clean."
        ),
    )
    add_target_arguments(parser)
    add_stack_arguments(parser)
    parser.add_argument(
        "--template",
        metavar="FILE",
        help="the SAM template the stack was deployed from (default: this checkout's)",
    )
    parser.add_argument("--json", action="store_true", help="the findings as JSON")
    parser.add_argument(
        "--fix",
        action="store_true",
        help="backfill WakeUp on paused STATE items written before the WakeUps index",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stack.doctor import diagnose, has_problems, with_wake_ups
    from stack.doctor_aws import StackReader
    from stack.local.emulator import DEFAULT_TEMPLATE
    from stack.local.template import TemplateError, load_template

    template_path = Path(args.template) if args.template else DEFAULT_TEMPLATE
    try:
        template = load_template(template_path)
    except (OSError, TemplateError) as error:
        raise CliError(f"cannot read the template {template_path}: {error}") from error
    target = AwsTarget.from_args(args)
    from botocore.exceptions import ClientError

    fixed: list[str] = []
    with aws_errors(target):
        try:
            reader = StackReader(target.client)
            report = reader.read(args.stack_name, template, args.table)
            if args.fix:
                fixed = reader.backfill(report.table, time.time())
        except ClientError as error:
            raise CliError(f"reading stack {args.stack_name} failed: {error}") from error
    findings = diagnose(with_wake_ups(report, fixed))
    if args.json:
        document: dict[str, Any] = {
            "stack": report.stack,
            "table": report.table,
            "clean": not has_problems(findings),
            "fixed": fixed,
            "findings": [finding.to_json() for finding in findings],
        }
        print(json.dumps(document, indent=2))
    else:
        for queue in fixed:
            print(f"fixed: queue {queue}: WakeUp set, the next tick decides it")
        for finding in findings:
            print(finding.line())
        if not has_problems(findings):
            queues, groups = len(report.queues), len(report.log_groups)
            print(
                f"clean: stack {report.stack}, {queues} registered queue"
                f"{'' if queues == 1 else 's'} and {groups} worker log group"
                f"{'' if groups == 1 else 's'} checked"
            )
    return 1 if has_problems(findings) else 0
