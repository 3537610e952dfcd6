"""`served`'s compositions: the counters beside an offline run, request by request, AIPerf's matrix, and its
settings section (the serving wing's commands/)."""
