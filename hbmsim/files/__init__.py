"""The boundary with the outside world: the one reader of user files and the one writer.

`reader` checks everything a user hands in (size first, then every field, then one line naming
the file, the field and what was expected); `writer` writes every file hbmsim produces as a
temporary file beside the target, renamed over it on success.
"""
