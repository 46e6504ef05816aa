# C types for stats.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

cdef double _BOUNDS[21]  # len(LATENCY_BUCKETS)
cdef Py_ssize_t _N_BOUNDS


cdef class Histogram:
    cdef public list counts
    cdef public double sum
    cdef public long long count
    @cython.locals(i=Py_ssize_t)
    cpdef observe(self, double seconds, long long weight=*)


@cython.final
cdef class _Cell:
    cdef public long long n


@cython.final
cdef class Counts:
    cdef dict _cells
    cdef object _key, _first, _second
    cdef _Cell _cell, _pair_cell

    cpdef add(self, object key, long long n=*)
    cpdef add_pair(self, object first, object second)
    @cython.locals(cell=_Cell)
    cdef _Cell _lookup(self, object key)


cdef class TaskStats:
    cdef public Counts emitted, transferred, acked, failed, timed_out, executed
    cdef public object complete_latency
    cdef public object complete_recorded, execute_latency, process_latency
    cdef public long long errors
    cdef public double busy_seconds
