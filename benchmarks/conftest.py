"""The main job: `pytest benchmarks --tokperf-engine llama-server`."""
