"""The interpretations of a tile program other than timing: execute it on NumPy values against
naive attention (`execute`, `reference`, `explain`), trace it op by op (`trace`, and its file
format `tracefile`), count it exactly at any size (`counts`), the closed forms that check
the counts (`analytic`), and the bound of a latent-K/V call read as a kernel for it would
(`intensity`).
"""
