# C types for the Transport (transport/__init__.py) where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.executor.base cimport Remote
from squall.transport.ingress cimport Ingress
from squall.transport.outbox cimport AckerOutbox, Outbox


cdef class _Boxes:
    cdef public Outbox data, control


cdef class Transport(Remote):
    cdef public str name, plan
    cdef set _inbound
    cdef public dict owner, links
    cdef public long long batch_size
    cdef public double flush_interval
    cdef public object clock, lost, receiver, _wake
    cdef public Ingress ingress
    cdef dict _outboxes
    cdef list _to
    cdef list _acker_boxes
    cdef object _decoder, _bind, _max_frame, _tls, _control
    cdef long long _streams
    cdef public bint waiting_room
    cdef public long long completed

    @cython.locals(boxes=_Boxes, box=Outbox, size=Py_ssize_t)
    cpdef bint try_send(self, long long task, object item) except -1

    cpdef bint _flush(self, Outbox box) except -1
