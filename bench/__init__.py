"""Benchmarks: decision quality (simulated) and operator overhead; results in bench/results/."""
