"""Moving tuples and acker traffic between worker and acker processes over gRPC.

Within a process nothing here is used: executors hand tuples over in memory.
"""

from squall.transport.transport import Transport

__all__ = ["Transport"]
