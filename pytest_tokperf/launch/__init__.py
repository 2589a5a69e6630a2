"""Local engine server processes: ``process`` (start one server, wait for health, stop it
with its children) and ``plans`` (how each engine is started: binary, flags, readiness).
"""
