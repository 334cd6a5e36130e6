"""The GPU: its fields and their checks (`hardware`), how many CTAs an SM holds (`occupancy`),
and which of its pipes a step's math may overlap on (`pipes`).
"""
