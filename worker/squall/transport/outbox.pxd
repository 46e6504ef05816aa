# C types for outbox.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython


cdef class Outbox:
    cdef public object link
    cdef public Py_ssize_t size
    cdef public double since
    cdef list _items
    cdef object _encode
    cpdef add(self, object item)
    cpdef bytes frame(self)


cdef class AckerOutbox(Outbox):
    cdef object _kinds, _tasks, _roots, _vals
    # the same arrays, as typed views for the hot path
    cdef unsigned char[::1] kinds
    cdef int[::1] tasks
    cdef unsigned long long[::1] roots, vals
    cdef dict _open
    cdef Py_ssize_t _n

    @cython.locals(kind=cython.int, root=object, val=cython.ulonglong, task=cython.int, at=Py_ssize_t)
    cpdef add(self, object item)

    cdef tuple _columns(self)


cdef class DataOutbox(AckerOutbox):
    cpdef add(self, object item)
    cpdef bytes frame(self)

