"""The tile-program language: plans, kernels, CTA classes and the context a program runs in
(`plan`), and symbolic grid coordinates that run a class's program once for all its CTAs
(`symbolic`).
"""
