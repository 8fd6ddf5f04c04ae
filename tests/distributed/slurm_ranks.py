"""Run under srun or rill-launch: every rank joins, sums its rank with the others' and says
who it is; its rank and size must be the ones srun gave its task (SLURM_PROCID and
SLURM_NTASKS), whether srun started it directly or for rill-launch."""
import os

import rill
import rill.distributed as dist

w = dist.init()
total = int(dist.all_reduce(rill.tensor([float(w.rank)])).numpy()[0])
assert total == w.size * (w.size - 1) // 2, total
if "SLURM_STEP_ID" in os.environ:
    assert (w.rank, w.size) == (int(os.environ["SLURM_PROCID"]),
                                int(os.environ["SLURM_NTASKS"])), os.environ
step = (f"slurm task {os.environ['SLURM_PROCID']} of {os.environ['SLURM_STEP_NUM_TASKS']}"
        if "SLURM_STEP_ID" in os.environ else "no slurm step")
print(f"rank {w.rank} of {w.size} is {w.task_name}{' (chief)' if w.chief else ''}, "
      f"sum {total}, {step}", flush=True)
