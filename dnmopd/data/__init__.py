"""Everything between a dataset row and a token sequence: release files, schema, chat rendering, sampler."""
