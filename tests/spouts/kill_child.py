"""Child process of test_kill.py: drives a LogSpout directly (no engine), at least once.

Prints "PARTITION OFFSET" for every tuple emitted. "Downstream" acks lag 20 tuples behind the
emits, so tuples are always in flight; the commit period is 0, so every acked prefix is committed
at once. With a stop-after count it stops emitting there and waits to be killed; without, it
exits with "done" once everything is emitted, acked and committed.
"""

import signal
import sys
from collections import deque

from spout_harness import RecordingCollector, context_for

from squall.spouts.log import LogSpout

path, stop_after = sys.argv[1], int(sys.argv[2])
spout = LogSpout()
collector = RecordingCollector(LogSpout, "records")
conf = {"log.path": path, "log.topic": "t", "log.group": "g", "offset.commit.period.ms": 0}
spout.open(conf, context_for(LogSpout), collector)
pending: deque = deque()
idle = 0
while True:
    before = len(collector.emitted)
    spout.next_tuple()
    new = collector.emitted[before:]
    for _, _, msg_id in new:
        print(msg_id.partition, msg_id.offset, flush=True)
        pending.append(msg_id)
    while len(pending) > 20:
        spout.ack(pending.popleft())
    if stop_after and len(collector.emitted) >= stop_after:
        signal.pause()  # killed here at the latest
    idle = 0 if new else idle + 1
    if idle == 2:  # nothing left to read
        while pending:
            spout.ack(pending.popleft())
        spout.close()
        print("done", flush=True)
        break
