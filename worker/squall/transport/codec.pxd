# C types for codec.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.tuples cimport Fields, Tuple


@cython.locals(t=Tuple, routes=dict, values=list, index="unsigned int[::1]", anchored="unsigned int[::1]",
               roots="unsigned long long[::1]", edges="unsigned long long[::1]", n=Py_ssize_t, i=Py_ssize_t,
               pairs=Py_ssize_t, k=Py_ssize_t, at=Py_ssize_t, last_task=cython.longlong,
               last_source=cython.longlong)
cpdef tuple_columns(list tuples)


cdef class Decoder:
    cdef public object plan, spout_tasks, acker_task, all_spout_tasks, forwards, on_congestion
    cdef dict _subscribed, _routes

    @cython.locals(routes=list, values=list, index="unsigned int[::1]", anchored="unsigned int[::1]",
                   roots="unsigned long long[::1]", edges="unsigned long long[::1]", out=list,
                   n=Py_ssize_t, pairs=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, at=Py_ssize_t,
                   c=Py_ssize_t, r="unsigned long long", last="unsigned long long", fields=Fields)
    cpdef list _tuples(self, cols)

    cpdef list _acker(self, cols)

    @cython.locals(i=Py_ssize_t, kind=cython.int, task=cython.int)
    cpdef _check_acker(self, unsigned char[::1] kinds, unsigned long long[::1] roots, int[::1] tasks)

    @cython.locals(out=list, i=Py_ssize_t, n=cython.ulonglong, ackers=tuple)
    cpdef list _forwarded(self, unsigned char[::1] kinds, unsigned long long[::1] roots,
                          unsigned long long[::1] vals, int[::1] tasks)

    @cython.locals(kinds=list, roots=list, tasks=list, out=list, i=Py_ssize_t, kind=cython.long)
    cpdef list _verdicts(self, cols)
