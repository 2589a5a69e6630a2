"""Getting a llama-server binary: ``releases`` (the registry's index), ``sdist`` (fetch
and identify a source distribution), ``cmake`` (compile llama-server), ``install`` (the
cached binaries), ``specs`` (what a build is: a release, a binary or a source tree,
``source_tree`` building the last), ``identity`` (what a binary reports and what changed
between two), ``prebuilt`` (a llama-server already on the machine, used before compiling),
``lock`` (one build of a release at a time, its owner named) and ``progress`` (elapsed
time and time left).

Running many sessions over the builds (compare-builds, bisect, the watch) is
``versions/``; this package sits below ``launch/``, which finds the default binary
through ``install``.
"""
