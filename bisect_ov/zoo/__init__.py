"""Models built in code and real topologies with seeded weights, for examples, tests and benchmarks."""
