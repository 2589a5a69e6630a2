"""Engine versions compared: from stored results (``compare``: two versions of one DB, or
two DBs), or by running pytest sessions over builds: ``sessions`` (one selection on
several builds, alternating, journalled), ``paired`` (the same-run A/B of two builds, its
documents judged), ``bisect`` (the first release of a step), ``watch`` (each release A/B'd
against a reference and its predecessor, flagged steps confirmed and named;
``watch_journal`` its record; ``report.watch`` prints it).

Builds come from ``builds/``; every session is an ordinary pytest run of the plugin.
"""
