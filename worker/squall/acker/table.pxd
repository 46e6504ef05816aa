# C types for table.py where Squall is compiled with Cython (pure Python mode: table.py stays plain
# Python, and runs as such elsewhere).
cimport cython

cdef int _INIT, _ACK, _FAIL, _RESET, _NO_TASK, _MAX_TASK, _FAILED_BIT, _RESET_BIT
cdef unsigned long long _EMPTY, _DELETED
cdef long long _NO_VERDICT
cdef double _MAX_LOAD


cdef class PendingTrees:
    cdef public object keys, vals, tasks, gens
    cdef unsigned long long[::1] _keys, _vals
    cdef unsigned short[::1] _tasks
    cdef unsigned char[::1] _gens
    cdef public Py_ssize_t cap, live
    cdef Py_ssize_t _used
    cdef int _generation

    @cython.locals(at=Py_ssize_t, value=cython.ulonglong, spout=cython.int, gen=cython.int)
    cpdef long long update(self, int kind, unsigned long long root, unsigned long long val,
                           long long task) except? -2

    @cython.locals(out=list, i=Py_ssize_t, verdict=cython.longlong)
    cpdef list apply_columns(self, unsigned char[::1] kinds, unsigned long long[::1] roots,
                             unsigned long long[::1] vals, int[::1] tasks)

    @cython.locals(cap=Py_ssize_t, at=Py_ssize_t, free=Py_ssize_t, key=cython.ulonglong)
    cdef Py_ssize_t _find(self, unsigned long long root) except -1
