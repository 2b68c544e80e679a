"""Environment construction for impala_rep."""

from impala_rep.envs.factory import (
    EnvSpec,
    check_env_options,
    describe_env,
    make_vector_env,
    register_env,
)

__all__ = ["EnvSpec", "check_env_options", "describe_env", "make_vector_env", "register_env"]
