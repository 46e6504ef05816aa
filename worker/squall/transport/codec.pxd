# C types for codec.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.tuples cimport Fields, Tuple


@cython.locals(t=Tuple, rows=list, flat=list)
cpdef bytes tuple_rows(list tuples)


cdef class Decoder:
    cdef public object plan, spout_tasks, acker_task, all_spout_tasks, forwards
    cdef dict _subscribed, _routes

    @cython.locals(out=list, known=dict, fields=Fields)
    cpdef list _tuples(self, bytes data)

    @cython.locals(kinds=list, roots=list, vals=list, tasks=list, i=Py_ssize_t, kind=cython.long)
    cpdef list _acker(self, cols)

    @cython.locals(out=list, i=Py_ssize_t, n=Py_ssize_t, ackers=tuple)
    cpdef list _forwarded(self, list kinds, list roots, list vals, list tasks)

    @cython.locals(kinds=list, roots=list, tasks=list, out=list, i=Py_ssize_t, kind=cython.long)
    cpdef list _verdicts(self, cols)
