"""`queuemesh demo`: the whole loop on an embedded AWS, the storm and the cure in two minutes.

The SAM template is deployed onto moto's server on loopback; the example worker runs behind
the telemetry wrapper in local Lambda containers and calls a real HTTP downstream whose
capacity follows the scenario; its EMF lines go through CloudWatch Logs and Kinesis to the
real controller, which moves the mapping's MaximumConcurrency and writes the DynamoDB ledger.
Every number in the summary comes from the downstream's own counters, the emulated SQS queues
and the ledger. See docs/demo.md.

``command``: the CLI command; ``run``: the run itself; ``view``: the terminal view; ``result``:
the result and its scores; ``summary``: the summary, the plot and the simulator's cards.
"""
