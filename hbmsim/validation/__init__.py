"""How well the simulator predicts real GPUs: our own recorded GPU runs (`gpu_runs`) and
published timings of the libraries (`published`).
"""
