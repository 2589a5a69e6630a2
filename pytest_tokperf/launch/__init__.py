"""Local engine server processes: ``process`` (start, wait for health, stop with children)
and ``plans`` (how each engine is started).
"""
