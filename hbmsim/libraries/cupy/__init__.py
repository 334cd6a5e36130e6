"""The validation run's vendor baseline: CuPy's cuBLAS matmuls and elementwise kernels."""
