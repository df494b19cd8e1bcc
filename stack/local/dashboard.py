"""`queuemesh dashboard`: the template's CloudWatch dashboard and the ledger, in a local page.

The page (``dashboard.html``: plain HTML, CSS and JavaScript, charts drawn as inline SVG, no
network access beyond this server) polls ``/api/dashboard``, which ``DashboardSource``
answers from CloudWatch (the template's own widgets, evaluated by ``stack.local.widgets``) and
from the DynamoDB ledger (each queue's state and its recent transitions, each group's last
report). The server listens on 127.0.0.1 only. See docs/dashboard.md.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stack.errors import CliError

if TYPE_CHECKING:
    from stack.local.widgets import Widget

PAGE = Path(__file__).with_name("dashboard.html")
LISTEN_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_WINDOW = "3h"  # the CloudWatch console's default time range
DEFAULT_REFRESH_S = 10.0
# Several browser tabs polling at once share one evaluation at most this often.
MIN_EVALUATION_INTERVAL_S = 1.0
TRANSITIONS_SHOWN = 30  # per queue, the most recent
# Where CloudWatch says "No data available", the page says what the emptiness means where it
# means one thing (``empty_note``): the group widgets while the ledger holds no group's report
# (a queue alone on its downstream forms no group), and the skips widget, whose documents are
# written only for a reason counted.
NO_GROUP_NOTE = (
    "No group reported yet: queues that call one downstream (or share a CONFIG Group) are "
    "decided together, and drawn here."
)
NOTHING_SKIPPED_NOTE = "Nothing skipped: a reason is drawn once something is skipped for it."
STOP_JOIN_S = 5.0


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """What the page shows: the time range (the last ``window_s``, not before ``start``), the
    period override (the console's; ``None`` keeps each widget's period) and how often the
    page refreshes."""

    window_s: float = 3 * 3600.0
    start: float | None = None
    period_s: int | None = None
    refresh_s: float = DEFAULT_REFRESH_S


class DashboardSource:
    """Everything the page shows, read when asked: the widgets' series and the ledger.

    ``client`` makes a boto3 client for a service name (``AwsTarget.client`` for AWS or an
    endpoint, ``EmbeddedAws.client`` for the demo's embedded AWS).
    """

    def __init__(
        self,
        client: Callable[[str], Any],
        stack_name: str,
        template: Path,
        table: str | None,
        settings: DashboardSettings,
        *,
        target: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from botocore.exceptions import ClientError

        from controller.actuator import LambdaActuator
        from controller.ledger import DynamoLedger
        from controller.policy import memory_type
        from stack.local.template import TemplateError, load_template
        from stack.local.widgets import (
            DashboardError,
            MetricsReader,
            StackFacts,
            dashboard_body,
            dashboard_name,
            parse_widgets,
        )
        from stack.ops.fleet import FleetOps

        self._clock = clock
        self.settings = settings
        self.target = target
        try:
            self.stack = StackFacts.read(client("cloudformation"), stack_name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ValidationError":
                raise
            raise CliError(
                f"stack {stack_name!r} not found at {target}; pass --stack-name (and --region "
                "or --endpoint-url)"
            ) from error
        try:
            document = load_template(template)
            self.name = dashboard_name(document, self.stack)
            self.widgets = parse_widgets(dashboard_body(document, self.stack))
        except (OSError, TemplateError, DashboardError) as error:
            raise CliError(f"cannot read the dashboard of {template}: {error}") from error
        self.table = table or self.stack.outputs.get("LedgerTableName")
        if not self.table:
            raise CliError(
                f"no ledger table: stack {stack_name} has no LedgerTableName output; "
                "pass --table or set QUEUEMESH_TABLE"
            )
        self._reader = MetricsReader(client("cloudwatch"))
        # The page only reads; the actuator is there because FleetOps takes one.
        self._ops = FleetOps(
            DynamoLedger(self.table, client("dynamodb"), memory_types=memory_type),
            LambdaActuator(client("lambda")),
        )
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, Any]] | None = None

    def snapshot(self) -> dict[str, Any]:
        """The page's data, evaluated at most once per ``MIN_EVALUATION_INTERVAL_S``."""
        with self._lock:
            now = self._clock()
            if self._last is None or now - self._last[0] >= MIN_EVALUATION_INTERVAL_S:
                self._last = (now, self._evaluate(now))
            return self._last[1]

    def time_range(self, now: float) -> tuple[float, float, int]:
        """[start, end) aligned to the period, as GetMetricData answers best."""
        periods = [query.period_s for widget in self.widgets for query in widget.queries]
        period = self.settings.period_s or max(periods, default=60)
        start = now - self.settings.window_s
        if self.settings.start is not None:
            start = max(start, self.settings.start)
        return (
            math.floor(start / period) * period,
            math.floor(now / period) * period + period,
            period,
        )

    def _evaluate(self, now: float) -> dict[str, Any]:
        from stack.ops.commands import audit_json
        from stack.ops.fleet import report_json, reports_of

        start, end, period = self.time_range(now)
        errors: list[str] = []
        try:
            series = self._reader.series(self.widgets, start, end, self.settings.period_s)
        except Exception as error:
            errors.append(f"CloudWatch: {error}")
            series = [[] for _ in self.widgets]
        queues: list[dict[str, Any]] = []
        transitions: list[dict[str, Any]] = []
        groups: list[dict[str, Any]] = []
        try:
            rows = self._ops.status()
            groups = [report_json(report) for report in reports_of(rows)]
            for row in rows:
                queues.append(row.to_json())
                trail = self._ops.ledger.audit_trail(row.queue, since=start)
                transitions.extend(
                    {"queue": row.queue, **audit_json(entry)}
                    for entry in reversed(trail[-TRANSITIONS_SHOWN:])
                )
        except Exception as error:
            errors.append(f"ledger {self.table}: {error}")
        return {
            "name": self.name,
            "stack": self.stack.name,
            "region": self.stack.region,
            "target": self.target,
            "generated_at": now,
            "start": start,
            "end": end,
            "period": period,
            "refresh_s": self.settings.refresh_s,
            "widgets": [
                {
                    **widget.to_json(),
                    "series": [line.to_json() for line in lines],
                    "empty_note": empty_note(widget, groups_reported=bool(groups)),
                }
                for widget, lines in zip(self.widgets, series, strict=True)
            ],
            "ledger": {
                "table": self.table,
                "queues": queues,
                "groups": groups,
                "transitions": transitions,
            },
            "errors": errors,
        }


def empty_note(widget: Widget, *, groups_reported: bool) -> str:
    """What the page says in place of the widget's chart when it has nothing to draw, where
    that has one meaning (else "", and the page says "No data available." as CloudWatch does)."""
    from controller.schema import CONTROLLER_NAMESPACE, CONTROLLER_SKIPPED, GroupMetric

    drawn = {(query.namespace, query.metric) for query in widget.queries}
    if drawn == {(CONTROLLER_NAMESPACE, CONTROLLER_SKIPPED)}:
        return NOTHING_SKIPPED_NOTE
    group_metrics = {(CONTROLLER_NAMESPACE, metric) for metric in GroupMetric}
    if drawn and drawn <= group_metrics and not groups_reported:
        return NO_GROUP_NOTE
    return ""


class DashboardServer:
    """The page and its data on 127.0.0.1; ``start`` returns the URL, ``stop`` closes it."""

    def __init__(self, source: DashboardSource, port: int = 0) -> None:
        self.source = source
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the dashboard server is not running")
        return f"http://{LISTEN_ADDRESS}:{self._server.server_address[1]}/"

    def start(self) -> str:
        page = PAGE.read_bytes()
        source = self.source

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._reply(HTTPStatus.OK, "text/html; charset=utf-8", page)
                elif path == "/api/dashboard":
                    body = json.dumps(source.snapshot(), default=str).encode()
                    self._reply(HTTPStatus.OK, "application/json", body)
                else:
                    self._reply(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

            def _reply(self, status: HTTPStatus, kind: str, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Cache-Control", "no-store")
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    # The page was closed or reloaded mid-answer (a traceback on the demo's
                    # terminal otherwise): no one is left to answer.
                    return

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the terminal belongs to the command (the demo's live view)."""

        try:
            self._server = ThreadingHTTPServer((LISTEN_ADDRESS, self._port), Handler)
        except OSError as error:
            raise CliError(
                f"cannot listen on {LISTEN_ADDRESS}:{self._port} ({error.strerror}); "
                "pass another --port"
            ) from error
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dashboard", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=STOP_JOIN_S)


# -- command line ----------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    from stack.aws import add_stack_arguments, add_target_arguments

    parser = subparsers.add_parser(
        "dashboard",
        help="the template's CloudWatch dashboard and the ledger, in a local web page",
        description=(
            "Serve template.yaml's Dashboard, evaluated from CloudWatch (ListMetrics, "
            "GetMetricData) for a deployed stack, beside the ledger's queues and transitions, "
            "on 127.0.0.1. The URL is the first line printed; Ctrl-C stops it."
        ),
    )
    add_target_arguments(parser)
    add_stack_arguments(parser)
    parser.add_argument(
        "--port", default=str(DEFAULT_PORT), help=f"port on 127.0.0.1 (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--since",
        default=DEFAULT_WINDOW,
        help=f"time range: relative (15m, 3h, 2d: a rolling window) or ISO-8601 (default "
        f"{DEFAULT_WINDOW})",
    )
    parser.add_argument(
        "--period",
        help="period override in seconds (1, 5, 10, 30 or a multiple of 60; default: each "
        "widget's own)",
    )
    parser.add_argument(
        "--refresh",
        default=str(DEFAULT_REFRESH_S),
        help=f"seconds between the page's refreshes (default {DEFAULT_REFRESH_S:g})",
    )
    parser.add_argument("--template", metavar="FILE", help="SAM template whose Dashboard to render")
    parser.set_defaults(func=run)


def parse_port(raw: str) -> int:
    if not raw.isdigit() or int(raw) > 65535:
        raise CliError(f"--port must be 0..65535 (0: any free port), got {raw!r}")
    return int(raw)


def parse_period(raw: str | None) -> int | None:
    from stack.local.widgets import valid_period

    if raw is None:
        return None
    if not raw.isdigit() or not valid_period(int(raw)):
        raise CliError(
            f"--period must be 1, 5, 10, 30 or a multiple of 60 seconds (GetMetricData's "
            f"periods), got {raw!r}"
        )
    return int(raw)


def parse_refresh(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 1.0 <= value <= 3600.0:
        raise CliError(f"--refresh must be 1..3600 seconds, got {raw!r}")
    return value


def settings_from(args: argparse.Namespace, now: float) -> DashboardSettings:
    from stack.ops.commands import parse_since

    start = parse_since(args.since, now)
    if start >= now:
        raise CliError(f"--since {args.since!r} is not in the past")
    # A relative value (3h) moves with the clock: a rolling window; an ISO time stays put.
    rolling = parse_since(args.since, now + 1.0) != start
    return DashboardSettings(
        window_s=now - start if rolling else math.inf,
        start=None if rolling else start,
        period_s=parse_period(args.period),
        refresh_s=parse_refresh(args.refresh),
    )


def run(args: argparse.Namespace) -> int:
    from stack.aws import AwsTarget, aws_errors
    from stack.local.emulator import DEFAULT_TEMPLATE

    port = parse_port(args.port)
    settings = settings_from(args, time.time())
    target = AwsTarget.from_args(args)
    template = Path(args.template) if args.template else DEFAULT_TEMPLATE
    with aws_errors(target):
        source = DashboardSource(
            target.client, args.stack_name, template, args.table, settings, target=target.describe()
        )
    server = DashboardServer(source, port)
    print(server.start(), flush=True)
    print(
        f"dashboard {source.name}: stack {source.stack.name} at {target.describe()}, ledger "
        f"{source.table}; Ctrl-C to stop",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
