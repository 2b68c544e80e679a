"""The actor side of impala_rep: stepping environments with a copy of the policy."""
