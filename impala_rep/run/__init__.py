"""The run layer: the command line, preparing a run, launching it (Ray or local), watching it.

It may import everything else; the algorithm modules of `impala_rep`, and
`learner/`, `actors/`, `envs/`, never import it (tests/test_layering.py).
"""
