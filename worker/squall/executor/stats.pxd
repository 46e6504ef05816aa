# C types for stats.py where Squall is compiled with Cython (squall/_pure.py).

cdef class Histogram:
    cdef public list counts
    cdef public double sum
    cdef public long long count
    cpdef observe(self, double seconds, long long weight=*)


cdef class TaskStats:
    cdef public object emitted, transferred, acked, failed, timed_out, executed, complete_latency
    cdef public object complete_recorded, execute_latency, process_latency
    cdef public long long errors
    cdef public double busy_seconds
