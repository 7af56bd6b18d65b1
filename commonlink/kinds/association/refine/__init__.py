"""Dataset refinement: the paper's MLLM verification of association chains (:mod:`.verify`: ordered verifier
models; :mod:`.claims`: what tasks claim about their images; :mod:`.repair`: how rejected claims are applied)
and the human review pages whose decisions verification reads back (:mod:`.review`).

These change datasets, they do not score models; they sit above ``eval`` only because verification asks a model
through the same cached backends an evaluation uses.
"""
