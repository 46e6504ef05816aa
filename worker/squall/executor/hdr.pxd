# C types for hdr.py where Squall is compiled with Cython (squall/_pure.py).

cdef class HdrHistogram:
    cdef public dict counts
    cdef public long long count, max_us

    cpdef record(self, double seconds)
