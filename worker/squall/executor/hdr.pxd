# C types for hdr.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

cdef long long _EXACT


cdef class HdrHistogram:
    cdef public dict counts
    cdef public long long count, max_us

    @cython.locals(us=cython.longlong, shift=cython.int, index=cython.longlong)
    cpdef record(self, double seconds)
