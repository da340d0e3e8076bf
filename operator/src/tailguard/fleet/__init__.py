"""A simulated vLLM fleet: gives the pods of a test cluster a vLLM voice (metrics driven by the simulator)."""
