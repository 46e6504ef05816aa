# C types for grouping.py where Squall is compiled with Cython (squall/_pure.py).
cimport cython
from cpython.unicode cimport PyUnicode_AsUTF8AndSize


cdef class Grouper:
    cpdef list choose(self, list values)


cdef class Shuffle(Grouper):
    cdef readonly list tasks, order
    cdef Py_ssize_t pos
    cdef object rng


cdef class Locality:
    cdef readonly object inboxes
    cdef readonly Py_ssize_t capacity
    cdef readonly double higher, lower


cdef class LocalityShuffle(Grouper):
    cdef readonly Shuffle near, far
    cdef readonly Locality locality
    cdef readonly bint wide
    cdef Py_ssize_t countdown

    @cython.locals(local=list)
    cpdef double load(self)


cdef bint _COMPILED
cdef unsigned int _CRC_TABLE[256]
cdef unsigned int _PREFIX_CRC[256]


cdef unsigned int _prefix_crc(Py_ssize_t size) except? 0


@cython.locals(table="unsigned int *", i=Py_ssize_t)
cdef unsigned int _crc32_chars(const char *p, Py_ssize_t size, unsigned int crc)


cdef class FieldsHash(Grouper):
    cdef readonly list tasks, indices
    cdef readonly Py_ssize_t single

    @cython.locals(data=bytes, size=Py_ssize_t, chars="const char *")
    cpdef list choose(self, list values)


cdef class Fixed(Grouper):
    cdef readonly list tasks


cdef class Custom(Grouper):
    cdef readonly object impl
    cdef long long task_id
    cdef frozenset targets
    cdef str name
    cdef tuple stream
