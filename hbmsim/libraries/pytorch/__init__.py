"""Mirror of PyTorch's eager attention: the kernel sequence `torch.matmul`, softmax, dropout and
`torch.matmul` launch (`eager`), and those kernels' tile programs (`kernels`).
"""
