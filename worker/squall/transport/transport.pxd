# C types for the Transport (transport/__init__.py) where Squall is compiled with Cython (squall/_pure.py).
cimport cython
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, nanosleep, timespec

from squall.executor.base cimport Remote
from squall.transport.ingress cimport Ingress
from squall.transport.outbox cimport AckerOutbox, Outbox


cdef class _Boxes:
    cdef public Outbox data, control


cdef class Transport(Remote):
    cdef public str name, fingerprint
    cdef set _inbound
    cdef public dict owner, links
    cdef public long long batch_size
    cdef public double flush_interval
    cdef double _due
    cdef public object clock, lost, receiver, _wake
    cdef public Ingress ingress
    cdef dict _outboxes
    cdef list _to
    cdef list _acker_boxes
    cdef object _decoder, _bind, _max_frame, _tls, _control
    cdef long long _streams
    cdef frozenset _senders
    cdef public bint waiting_room
    cdef bytearray _congested
    cdef bytes _state
    cdef long long _version
    cdef dict _told
    cdef bint _unsettled
    cdef list _tasks
    cdef frozenset _forwards
    cdef double _round
    cdef long long _inside
    cdef bint _claimed, _closed
    cdef object _lock, _kick, _flusher

    cdef inline _enter(self)

    cdef inline bint _held(self, double now, double interval) noexcept nogil

    @cython.locals(ts=timespec, now=cython.double, wait=cython.double)
    cdef _wait_held(self, double interval)

    @cython.locals(boxes=_Boxes, box=Outbox, size=Py_ssize_t)
    cpdef bint try_send(self, long long task, object item) except -1

    @cython.locals(box=Outbox, size=Py_ssize_t)
    cpdef bint try_message(self, long long task, int kind, object root, unsigned long long val, int spout) except -1

    @cython.locals(boxes=_Boxes)
    cdef inline _Boxes _boxes(self, long long task)

    @cython.locals(size=Py_ssize_t)
    cdef inline Py_ssize_t _room_in(self, Outbox box) except -2

    cdef inline _added(self, Outbox box, Py_ssize_t size)

    cpdef bint _flush(self, Outbox box) except -1

    cdef bint _flush_due(self, double now) except -1
