# cython: language_level=3
"""Storm's API with no engine behind it: ``bench/wordcount.py``'s floor case.

The bench's own spout and bolts are called as an engine calls them (``next_tuple``, each bolt's
``execute`` of each tuple, their ``emit`` and ``ack`` calls back), by a compiled loop, through a
compiled collector that only keeps what is emitted and a tuple that only holds its values. No ids,
no acking, no routing, no queues: what is left is what any engine of Storm's API pays in CPython
for this user code, whatever its own cost.
"""


cdef class Tuple:
    """A tuple that holds its values and nothing else."""
    cdef public object values


cdef inline Tuple _tuple(values):
    # Allocated without calling the type (no argument parsing): as cheap as a tuple object gets
    cdef Tuple tup = Tuple.__new__(Tuple)
    tup.values = values
    return tup


cdef class Collector:
    """An emit that keeps the values it is given, and an ack that does nothing."""
    cdef public list emitted

    def __cinit__(self):
        self.emitted = []

    def emit(self, values, *, stream=None, anchors=None, msg_id=None):
        self.emitted.append(values)

    def ack(self, tup):
        pass


def trees(spout, split, count, Collector collector, int batch):
    """``batch`` trees: the spout's ``next_tuple`` ``batch`` times, then the split's ``execute`` of each
    sentence emitted, then the count's of each word."""
    cdef list emitted
    next_tuple, split_execute, count_execute = spout.next_tuple, split.execute, count.execute
    for _ in range(batch):
        next_tuple()
    emitted, collector.emitted = collector.emitted, []
    for values in emitted:
        split_execute(_tuple(values), collector)
    emitted, collector.emitted = collector.emitted, []
    for values in emitted:
        count_execute(_tuple(values))
