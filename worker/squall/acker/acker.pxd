# C types for acker.py where Squall is compiled with Cython (squall/_pure.py).

from squall.acker.table cimport PendingTrees


cdef class AckBatch:
    cdef public object kinds, roots, vals, tasks


cdef class Acker:
    cdef public PendingTrees trees
    cdef public long long expired
    cpdef list process_messages(self, object messages)
    cpdef list process_batch(self, AckBatch batch)
