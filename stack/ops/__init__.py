"""The operator's side: `queuemesh register | status | audit | pin | unpin | mode` on a deployed
stack (``commands``: the CLI; ``fleet``: ``FleetOps``, the actions behind it). A plain
`pip install queuemesh` runs it: nothing here imports the local stack (``stack.local``)."""
