# C types for spout.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.executor.base cimport Executor, SetupRetries
from squall.executor.collectors cimport SpoutCollector
from squall.executor.rotating cimport RotatingMap
from squall.executor.hdr cimport HdrHistogram
from squall.executor.stats cimport Histogram, TaskStats
from squall.tuples cimport Tuple


cdef class SpoutTask:
    cdef public long long task_id
    cdef public object spout
    cdef public TaskStats stats
    cdef public SpoutCollector collector
    cdef public long long pending, idle
    cdef public double wake
    cdef public list untracked_acks
    cdef public bint opened


cdef class PendingTree:
    cdef public SpoutTask task
    cdef public object msg_id
    cdef public str stream
    cdef public double start


cdef class SpoutExecutor(Executor):
    cdef public dict tasks
    cdef public RotatingMap pending
    cdef public object max_pending, wait, clock, report
    cdef public bint active
    cdef public dict opens
    cdef public SetupRetries retries
    cdef public dict checkpoints

    @cython.locals(task=SpoutTask, before=cython.longlong, progress=cython.bint, began=cython.double,
                   limit=cython.longlong, limited=cython.bint)
    cpdef bint run_once(self, double now) except -1

    @cython.locals(tree=PendingTree)
    cdef bint _take_verdicts(self) except -1

    cdef bint _call(self, SpoutTask task, object fn, object arg=*) except -1

    @cython.locals(task=SpoutTask, latency=cython.double, buckets=Histogram, recorded=HdrHistogram)
    cpdef _settle(self, PendingTree tree, bint acked, bint timed_out=*)
