# C types for outbox.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.executor.base cimport Transfer


cdef class Outbox:
    cdef public object link
    cdef public Py_ssize_t size
    cdef public double since
    cdef list _items
    cdef object _encode
    cpdef add(self, object item)
    cpdef message(self, int kind, object root, unsigned long long val, int task)
    cpdef bytes frame(self)


@cython.final
cdef class _Young:
    cdef unsigned long long value
    cdef int task
    cdef double since


cdef class AckerOutbox(Outbox):
    cdef object _kinds, _tasks, _roots, _vals
    # the same arrays, as typed views for the hot path
    cdef unsigned char[::1] kinds
    cdef int[::1] tasks
    cdef unsigned long long[::1] roots, vals
    cdef dict _open, _young
    cdef Py_ssize_t _n, capacity
    cdef double _now
    cdef public double keep
    cdef public Transfer transfer
    cdef public list verdicts
    cdef public long long completed

    @cython.locals(kind=cython.int, root=object, val=cython.ulonglong, task=cython.int)
    cpdef add(self, object item)

    @cython.locals(tree=_Young)
    cpdef message(self, int kind, object root, unsigned long long val, int task)

    @cython.locals(at=Py_ssize_t)
    cdef _fold(self, int kind, object root, unsigned long long val, int task)

    @cython.locals(room=Py_ssize_t, before=cython.double, old=list, tree=_Young)
    cpdef expire(self, double now)

    cdef _complete(self, object root, int task, bint at_once)

    @cython.locals(kind=cython.int, at=Py_ssize_t, kept=Py_ssize_t)
    cdef tuple _columns(self)


cdef class DataOutbox(AckerOutbox):
    cdef public Py_ssize_t max_frame
    cdef bint _rest

    @cython.locals(kind=cython.int, root=object, val=cython.ulonglong, task=cython.int)
    cpdef add(self, object item)
    cpdef message(self, int kind, object root, unsigned long long val, int task)

    @cython.locals(items=list, n=Py_ssize_t, budget=Py_ssize_t, total=Py_ssize_t)
    cpdef bytes frame(self)
