"""Nsight Systems SQLite exports: the reader, its table readers and the fast page decoder."""
