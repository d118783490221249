"""Hand-written kernels for paths where torch's general ones leave speed on the table (compiled on first use)."""
