"""The actor side of impala_rep: `actor.Actor` steps environments with a copy of the policy."""
