"""The `queuemesh` commands that drive the load layer: each module parses its arguments, calls
``load/``, prints the result and turns the errors it expects into one-line ``CliError``s."""
