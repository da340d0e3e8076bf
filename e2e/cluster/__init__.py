"""tailguard's local test cluster: real Kubernetes components built from their Go modules, run on loopback."""
