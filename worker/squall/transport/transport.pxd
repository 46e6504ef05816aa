# C types for the Transport (transport/__init__.py) where Squall is compiled with Cython (squall/_pure.py).
cimport cython

from squall.transport.ingress cimport Ingress


cdef class Transport:
    cdef public str name, plan
    cdef set _inbound
    cdef public dict owner, links
    cdef public long long batch_size
    cdef public double flush_interval
    cdef public object clock, lost, receiver, _wake
    cdef public Ingress ingress
    cdef dict _buffers, _since, _merged
    cdef object _ackers, _decoder, _bind, _max_frame, _tls, _control
    cdef long long _streams

    @cython.locals(key=tuple, buf=list, size=Py_ssize_t, merged=dict)
    cpdef bint try_send(self, long long task, object item) except -1


@cython.locals(kind=cython.int, at=object, first=object, value=object)
cpdef bint fold(list buf, dict merged, tuple message) except -1
