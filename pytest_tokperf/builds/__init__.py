"""Every llama.cpp release feature: ``releases`` (the registry's index), ``sdist`` (fetch
and identify a source distribution), ``cmake`` (compile llama-server), ``install`` (the
cached binaries), ``compare`` (compare-builds: alternating sessions of two builds) and
``bisect`` (narrow a step to the releases between two builds); ``watch`` (each release
A/B'd against a reference and its predecessor, flagged steps named; ``watch_journal``,
``watch_report``); ``specs`` (what a build is: a release, a binary or a source tree,
``source_tree`` building the last); ``prebuilt`` (a llama-server already on the machine,
used before compiling), ``lock`` (one build of a release at a time, its owner named) and
``progress`` (elapsed time and time left).

``compare``, ``bisect`` and ``watch`` drive whole pytest sessions, so they sit above a
run; the rest is below ``launch/``, which finds the default binary through ``install``.
"""
