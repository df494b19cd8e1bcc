"""The QueueMesh simulator: scenarios, a discrete-event model of SQS -> Lambda -> downstream,
and the policies it compares."""
