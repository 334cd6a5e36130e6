"""The walkthrough: two algorithms' tiles animated on one clock from the engine's timeline
(`animation`), drawn (`figure`) with their running totals (`totals`).
"""
