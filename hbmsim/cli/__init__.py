"""The `hbmsim` command: its argument parser (`parser`), the commands (`commands`) and the text
report (`report`).
"""
