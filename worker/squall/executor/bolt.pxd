# C types for bolt.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.executor.base cimport Executor, SetupRetries
from squall.executor.collectors cimport BasicCollector, BoltCollector, HeldCount
from squall.executor.stats cimport TaskStats
from squall.tuples cimport Tuple


cdef class BoltTask:
    cdef public long long task_id
    cdef public object bolt
    cdef public TaskStats stats
    cdef public BoltCollector collector
    cdef public BasicCollector basic


cdef class BoltExecutor(Executor):
    cdef public HeldCount held
    cdef public dict tasks
    cdef public object clock, report
    cdef public dict prepares
    cdef public SetupRetries unprepared
    cdef public long long countdown
    cdef public double slow_until

    @cython.locals(tasks=dict, held=HeldCount, n=cython.long, limit=cython.long, step=cython.long, tup=Tuple,
                   task=BoltTask, began=cython.double, start=cython.double, took=cython.double, share=cython.double)
    cpdef bint run_once(self, double now) except -1

    @cython.locals(basic=BasicCollector)
    cpdef _execute(self, BoltTask task, Tuple tup)
