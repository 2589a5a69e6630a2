"""A benchmarking run: engine session, measurement, ceilings, recording and the gate.

``session`` (the engine, started or attached), ``measure`` (generations -> figures),
``speculative`` (A/B), ``ceilings`` (bytes per token x bandwidth per workload),
``recorder`` (results -> store), ``gate`` (a result against its history), ``fixture``
(``TokBench``: what a test or the CLI calls).
"""
