"""The learner side of impala_rep: replication of a per-replica step over devices."""
