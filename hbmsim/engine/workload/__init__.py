"""What the engine replays: each kernel's op templates, each CTA's template, and every access's
tile key, built from a trace (`work.from_trace`, the reference) or fast from one run per CTA
class (`classkeys.from_plan_fast`).
"""
