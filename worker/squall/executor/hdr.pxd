# C types for hdr.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

cdef long long _EXACT


@cython.locals(shift=cython.int)
cpdef long long bucket_of(long long us)


cdef class HdrHistogram:
    cdef public dict counts
    cdef public long long count, max_us

    @cython.locals(us=cython.longlong, index=cython.longlong)
    cpdef record(self, double seconds)
