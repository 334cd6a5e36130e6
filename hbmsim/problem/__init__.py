"""The workload: one attention call's shape (`attention.Problem`) and model presets (`models`)."""
