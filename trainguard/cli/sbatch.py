"""``trainguard sbatch``: write a batch script that runs COMMAND under ``trainguard run
--adapter slurm`` and submit it; run options before ``--``, sbatch options and COMMAND after."""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

from trainguard.cli.parser import build_parser, join_aimaster_args
from trainguard.cli.run import policy_from
from trainguard.errors import TrainguardError
from trainguard.store import default_state_dir


def sbatch_main(args_in: list[str]) -> int:
    cut = args_in.index("--") if "--" in args_in else len(args_in)
    head, tail = args_in[:cut], args_in[cut + 1:]
    at = head.index("sbatch")
    run_options = [a for a in head[at + 1:] if a != "--dry-run"]
    dry_run = "--dry-run" in head[at + 1:]
    try:
        # Check the run options now, so a typo fails here and not in the queue hours later.
        checked = build_parser().parse_args([*head[:at], "run", *join_aimaster_args(run_options)])
        policy_from(checked)
        sbatch_options = []
        while tail and tail[0].startswith("-"):
            sbatch_options.append(tail.pop(0))
        if not tail:
            raise TrainguardError("sbatch needs a command after --, e.g. trainguard sbatch --nproc 4 -- "
                                  "--nodes=3 python train.py")
        state_dir = Path(checked.state_dir or default_state_dir()).resolve()
        from trainguard.adapters.slurm_submit import batch_script

        script = batch_script(run_options, state_dir, tail)
        if dry_run:
            print(script, end="")
            return 0
        folder = state_dir / "sbatch"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (time.strftime("trainguard-%Y%m%d-%H%M%S-") + secrets.token_hex(2) + ".sh")
        path.write_text(script)
        path.chmod(0o755)
        from trainguard.adapters.slurm import slurm_command

        job = slurm_command("sbatch", "--parsable", *sbatch_options, str(path)).strip().split(";")[0]
    except TrainguardError as exc:
        sys.stderr.write(f"trainguard: error: {exc}\n")
        return exc.exit_code
    print(f"submitted Slurm job {job}; trainguard job slurm-{job}; history: trainguard history slurm-{job} "
          f"--state-dir {state_dir}")
    return 0
