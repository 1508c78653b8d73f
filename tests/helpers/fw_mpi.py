"""An mpi4py program for framework tests: every rank records what it was given, rank
``$FW_KILL_RANK`` kills itself (SIGKILL) once (``$FW_KILL_ONCE`` marks it), then all meet in a
barrier and an allreduce checks the world. Rank ``$FW_ECC_RANK`` prints an uncorrectable ECC
error and exits 1 once (``$FW_ECC_ONCE``)."""

import json
import os
import signal
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
with open(os.environ["FW_RECORD"], "a") as out:
    out.write(json.dumps({"rank": rank, "size": size, "round": os.environ.get("TRAINGUARD_RESTART_ROUND"),
                          "hostfile": os.environ.get("TRAINGUARD_HOSTFILE"),
                          "hosts": os.environ.get("TRAINGUARD_HOSTS"), "RANK": os.environ.get("RANK")}) + "\n")
ecc = os.environ.get("FW_ECC_ONCE")
if ecc and rank == int(os.environ.get("FW_ECC_RANK", "-1")) and not os.path.exists(ecc):
    open(ecc, "w").close()
    print("RuntimeError: CUDA error: uncorrectable ECC error encountered", file=sys.stderr, flush=True)
    os._exit(1)  # a crash: no MPI_Finalize, which would wait for the others
once = os.environ.get("FW_KILL_ONCE")
if once and rank == int(os.environ.get("FW_KILL_RANK", "-1")) and not os.path.exists(once):
    open(once, "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
total = comm.allreduce(1, op=MPI.SUM)
comm.Barrier()
if rank == 0:
    print(f"mpi job done: {total} ranks", flush=True)
sys.exit(0 if total == size else 1)
