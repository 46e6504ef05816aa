"""Durable bolt state: Storm's stateful bolts, their key-value state, its stores and the checkpoint protocol."""
