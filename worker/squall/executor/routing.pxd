# C types for routing.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

from squall.grouping cimport Grouper
from squall.tuples cimport Fields


cdef class DirectOnly(Grouper):
    cdef readonly str message


cdef class Router:
    cdef public str component
    cdef public long long task_id
    cdef public long long max_value_bytes, max_frame
    cdef public dict fields, groupers, direct, budgets
    cdef str _stream
    cdef public Fields routed
    cdef list _groupers
    cdef long long _budget

    @cython.locals(fields=Fields, limit=cython.longlong, total=cython.longlong, size=Py_ssize_t, groupers=list,
                   grouper=Grouper, targets=list)
    cpdef list route(self, str stream, list values)


cdef bint _COMPILED


@cython.locals(size=Py_ssize_t)
cdef Py_ssize_t _wire_size(str text) except? -2
