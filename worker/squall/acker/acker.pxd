# C types for acker.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.acker.table cimport PendingTrees

cdef long long _NO_VERDICT


cdef class AckBatch:
    cdef public object kinds, roots, vals, tasks


cdef class Acker:
    cdef public PendingTrees trees
    cdef public long long expired
    cpdef list process_messages(self, object messages)
    @cython.locals(verdict=cython.longlong)
    cpdef object process_message(self, int kind, object root, unsigned long long val, long long task)
    cpdef list process_batch(self, AckBatch batch)
