"""Expected speed: what a model should reach on a device, and which results fall short.

``prediction`` (``predict``: the ceiling and a likely range on hardware you may not
have), ``bands`` (fixed efficiency bands with their sources), ``band_fit`` (the model
fitted on the public record, shipped as ``band_fit.json``), ``band_choice`` (the one
band predict, import and outliers use), ``llama_bench_parse`` and ``llama_bench_import``
(llama-bench's own output as stored results), ``outliers`` (results below their band).
See docs/expected-speed.md.
"""
