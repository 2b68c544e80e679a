"""Environment construction for impala_rep."""
