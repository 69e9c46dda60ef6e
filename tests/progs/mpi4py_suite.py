"""Runs mpi4py's test suite with each rank's report in a file of its own,
so that ranks writing at once cannot interleave it.

    mpirun -np N python3 mpi4py_suite.py OUTDIR .../test/runtests.py [args]

writes OUTDIR/rank<R>.txt and exits as the suite does.
"""
import os
import runpy
import sys

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
rank = next((os.environ[k] for k in RANK_VARS if k in os.environ), "0")
out, suite = sys.argv[1], sys.argv[2]
sys.stderr = open(os.path.join(out, f"rank{rank}.txt"), "w", buffering=1)
sys.argv = [suite] + sys.argv[3:]
runpy.run_path(suite, run_name="__main__")
