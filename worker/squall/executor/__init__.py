"""Executors and the scheduler loop of one process: spouts, bolts and acker tasks, their inboxes,
the collectors user code emits through, routing, stats and error reporting."""
