"""The shared kernel every package may import: injectable time, the exception tree, the line-
numbered YAML loader. Imports nothing else from monitor.
"""
