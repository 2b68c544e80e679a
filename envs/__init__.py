"""Environment construction for impala_rep."""

from impala_rep.envs.factory import EnvSpec, describe_env, make_vector_env

__all__ = ["EnvSpec", "describe_env", "make_vector_env"]
