"""A job of many ranks: per-rank tables, collectives matched across ranks, clock alignment, the straggler.

Also the job reading (``reading``) and the runner that spreads per-rank work over processes or Dask (``run``).
"""
