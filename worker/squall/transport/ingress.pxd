# C types for ingress.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.executor.base cimport Transfer
from squall.tuples cimport Tuple


cdef class _Lane:
    cdef public object frames
    cdef public list items
    cdef public Py_ssize_t at


cdef class Ingress:
    cdef Transfer _transfer
    cdef object _wake
    cdef _Lane _control, _data
    cdef dict _lanes
    cdef public double last_input

    cpdef bint deliver(self) except -1

    @cython.locals(transfer=Transfer, items=list, at=Py_ssize_t, n=Py_ssize_t, moved=Py_ssize_t, tup=Tuple)
    cdef Py_ssize_t _deliver(self, _Lane lane) except -1
