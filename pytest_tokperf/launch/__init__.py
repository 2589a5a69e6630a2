"""Local engine server processes: ``process`` (start, wait for health, stop with children),
``watchdog`` (stops them if tokperf is killed) and ``plans`` (how each engine is started).
"""
