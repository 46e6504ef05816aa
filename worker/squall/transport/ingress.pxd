# C types for ingress.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.acker.acker cimport AckBatch
from squall.executor.base cimport Transfer
from squall.tuples cimport Tuple


cdef class Ingress:
    cdef Transfer _transfer
    cdef object _wake, _control, _data
    cdef dict _lanes, _held, _weights
    cdef public Py_ssize_t limit, held
    cdef Py_ssize_t _control_limit
    cdef public set congested
    cdef public bint changed
    cdef public double last_input

    cpdef bint deliver(self) except -1

    cdef Py_ssize_t _deliver(self, object lane, Py_ssize_t limit) except -1

    @cython.locals(transfer=Transfer, held=dict, moved=Py_ssize_t, tup=Tuple, task=cython.longlong,
                   weight=Py_ssize_t, queued=Py_ssize_t)
    cdef Py_ssize_t _distribute(self, list items) except -1

    @cython.locals(transfer=Transfer, moved=Py_ssize_t, weight=Py_ssize_t)
    cdef Py_ssize_t _release(self) except -1

    cdef _ease(self)


cdef Py_ssize_t _weight(object item) except -1
