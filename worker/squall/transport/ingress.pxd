# C types for ingress.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython


cdef class Ingress:
    cdef object _try_deliver, _wake
    cdef dict _lanes
    cdef public double last_input

    @cython.locals(progress=cython.bint, parked=object)
    cpdef bint deliver(self) except -1
