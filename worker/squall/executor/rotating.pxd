# C types for rotating.py where Squall is compiled with Cython (squall/_pure.py).

cdef class RotatingMap:
    cdef list _buckets
    cpdef put(self, object key, object value)
    cpdef object pop(self, object key)
    cpdef bint touch(self, object key) except -1
