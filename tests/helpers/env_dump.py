"""Write this rank's environment to ``$ENV_DUMP_DIR/rank-$RANK.json``; with ``ENV_DUMP_RAISE``,
then raise inside a torchrun ``@record`` entry point (which writes torchrun's error file)."""

import json
import os

with open(os.path.join(os.environ["ENV_DUMP_DIR"], f"rank-{os.environ['RANK']}.json"), "w") as out:
    json.dump(dict(os.environ), out)

if os.environ.get("ENV_DUMP_RAISE"):
    from torch.distributed.elastic.multiprocessing.errors import record

    # Nothing on stderr: the error file torchrun's @record writes is then the only evidence.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)

    @record
    def main():
        raise ValueError("shape mismatch: expected [4, 8] got [4, 9] in layer decoder.7")

    main()
