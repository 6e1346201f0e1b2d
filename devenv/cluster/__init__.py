"""Schedulers (L0 text and job shapes): what a cluster backend submits and reads, free of I/O."""
