"""Plotly figures, pure functions of results: the app and the CLI both use them and neither builds
figures itself. Plotly loads with the first figure module imported, not with `hbmsim`.
"""
