# C types for routing.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.grouping cimport Grouper
from squall.tuples cimport Fields


cdef class DirectOnly(Grouper):
    cdef readonly str message


cdef class Router:
    cdef public str component
    cdef public long long task_id
    cdef public long long max_value_bytes
    cdef public dict fields, groupers, direct
    cdef str _stream
    cdef public Fields routed
    cdef list _groupers

    @cython.locals(fields=Fields, limit=cython.longlong, groupers=list, grouper=Grouper, targets=list)
    cpdef list route(self, str stream, list values)
