"""Spark for topologies: :class:`SparkBolt` runs a PySpark DataFrame function over micro-batches.

Importing this package does not import PySpark; the worker's one SparkSession is built on first use
(see :mod:`squall.spark.session` and ``docs/spark.md``).
"""

from squall.spark.bolt import SparkBolt

__all__ = ["SparkBolt"]
