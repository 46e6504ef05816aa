# C types for base.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython

cdef class Executor


cdef class SetupRetries:
    cdef public str component, call
    cdef public object log
    cdef public dict waits
    cpdef double failed(self, long long task_id, double now) except? -1
    cpdef bint returned(self, long long task_id) except -1


cdef class Remote:
    cpdef bint try_send(self, long long task, object item) except -1
    cpdef bint try_message(self, long long task, int kind, object root, unsigned long long val, int spout) except -1


cdef class Transfer:
    cdef public long long capacity
    cdef public dict inboxes
    cdef public list local, appends, ackers
    cdef public Remote remote
    cpdef register(self, long long task, object inbox, Executor acker=*)
    cpdef bint try_send(self, long long task, object item) except -1
    cpdef bint try_local(self, long long task, object item) except -1
    cdef inline bint _append(self, long long task, object inbox, object item) except -1


cdef class Executor:
    cdef public str component
    cdef public tuple task_ids
    cdef public Transfer transfer
    cdef public object inbox, overflow
    cdef list _local, _appends, _ackers
    cdef long long _capacity
    cpdef send(self, long long task, object item)
    cpdef take_message(self, int kind, object root, unsigned long long val, int spout)
    @cython.locals(remote=Remote, acker=Executor)
    cpdef send_message(self, long long task, int kind, object root, unsigned long long val, int spout)
    cpdef bint flush(self) except -1
    cpdef bint run_once(self, double now) except -1
