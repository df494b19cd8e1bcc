"""The local stack: the embedded AWS on moto (``emulator``), the local Lambda runtime
(``runtime``), the demo (``demo``), the dashboard (``dashboard``, ``widgets``) and the offline
template (``template``). Its dependencies come with `pip install 'queuemesh[local]'`; the CLI
says so in one line when a command of it runs without them (``stack.cli``)."""
