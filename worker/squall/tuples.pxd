# C types for tuples.py where Squall is compiled with Cython (squall/_pure.py): Tuple and Fields as
# extension types, their fields as C struct members.

cimport cython


cdef class Fields:
    cdef public tuple names
    cdef dict _index


cdef class Tuple:
    cdef public list values
    cdef public Fields fields
    cdef public str source_component, source_stream
    cdef public long long source_task, task
    cdef public object root
    cdef public unsigned long long edge
    cdef public dict trees
    cdef public unsigned long long ack_val
    cdef public int done
    cdef public double received

    @staticmethod
    @cython.locals(tup=Tuple)
    cdef Tuple make(list values, Fields fields, str source_component, str source_stream, long long source_task,
                    object root, unsigned long long edge, dict trees, long long task)

    cpdef bint tracked(self)
