# C types for the acker executor (executor/acker.py) where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.acker.acker cimport AckBatch, Acker
from squall.executor.base cimport Executor


cdef class AckerExecutor(Executor):
    cdef public Acker acker

    @cython.locals(messages=list, notes=list, n=Py_ssize_t)
    cpdef bint run_once(self, double now) except -1

    cpdef take_message(self, int kind, object root, unsigned long long val, int spout)
