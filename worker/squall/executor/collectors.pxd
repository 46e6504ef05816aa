# C types for collectors.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.executor.base cimport Executor
from squall.executor.routing cimport Router
from squall.executor.stats cimport Counts, TaskStats
from squall.tuples cimport Fields, Tuple


cdef unsigned long long _MASK, _GAMMA, _MIX1, _MIX2


@cython.final
cdef class EdgeIds:
    cdef unsigned long long _state

    @cython.locals(z=cython.ulonglong)
    cpdef unsigned long long next(self)


cpdef unsigned long long root_of(unsigned long long draw, unsigned long long n, unsigned long long k)


@cython.locals(k=cython.ulonglong, root=cython.ulonglong)
cpdef unsigned long long new_root(EdgeIds ids, unsigned long long n, tuple residues) except? 0


cdef class AckerRoute:
    cdef public tuple tasks
    cdef public Py_ssize_t n
    cdef public dict residues


cdef class HeldCount:
    cdef public long long n


cdef class SpoutCollector:
    cdef Executor _executor
    cdef Router _router
    cdef TaskStats _stats
    cdef EdgeIds _ids
    cdef object _on_emit, _on_untracked_ack, _report
    cdef AckerRoute _acker
    cdef tuple _residues
    cdef public long long emits

    # root: an object, one int shared by the tree's tuples and its acker messages
    @cython.locals(executor=Executor, acker=AckerRoute, ids=EdgeIds, t=cython.longlong, root=object,
                   edge=cython.ulonglong, ack_val=cython.ulonglong, task_id=cython.longlong)
    cpdef list _emit(self, list targets, list values, Fields fields, str stream, object msg_id)


cdef class BoltCollector:
    cdef Executor _executor
    cdef object _post, _report, _clock
    cdef EdgeIds _ids
    cdef TaskStats _stats
    cdef Counts _acked
    cdef public bint paused
    cdef HeldCount _held
    cdef Router _router
    cdef AckerRoute _acker

    @cython.locals(fields=Fields, targets=list)
    cpdef list _route_and_emit(self, list values, object anchors, str stream)

    @cython.locals(executor=Executor, anchor=Tuple, one=Tuple, ids=EdgeIds, t=cython.longlong, root=object,
                   edge=cython.ulonglong, task_id=cython.longlong, trees=Py_ssize_t)
    cpdef list _emit(self, list targets, list values, Fields fields, str stream, object anchors)

    @cython.locals(edges=dict, ids=EdgeIds, anchor=Tuple, root=object, prior=object, edge=cython.ulonglong)
    cpdef dict _edges(self, object anchors)

    @cython.locals(executor=Executor, acker=AckerRoute, tasks=tuple, n=Py_ssize_t, ack_val=cython.ulonglong,
                   root=object, edge=cython.ulonglong, at=cython.ulonglong)
    cpdef ack(self, Tuple tup)

    cpdef fail(self, Tuple tup)


cdef class BasicCollector:
    cdef BoltCollector _out
    cdef public Tuple input
