"""The embedded stack of `monitor up`: Tansu broker, private Postgres, ports, processes, endpoints,
the demo traffic and its summary.
"""
