"""Kafka and HTTP ingest: the batch loop, the event writer and its roll-up SQL, dead letters. Pure
row building beside the I/O edge.
"""
