"""The store keeper: hosts the in-process base store where no rank's death can take it.

The supervisor must not import torch, so it starts this small process
(``python -m trainguard.inprocess.keeper ADDRESS_FILE HOST``) when the first wrapped rank says
hello. It hosts a ``TCPStore`` on a free port, writes ``{"host", "port", "pid"}`` to
ADDRESS_FILE (atomically, for the ranks to find), then applies the supervisor's commands, one
JSON object a line on its stdin: ``{"set": KEY, "value": TEXT}``. It exits when its stdin
closes: the supervisor ended, or died.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta


def main(argv: list[str]) -> int:
    address_file, host = argv
    from torch.distributed import TCPStore

    store = TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    tmp = f"{address_file}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        json.dump({"host": host, "port": store.port, "pid": os.getpid()}, out)
    os.replace(tmp, address_file)
    for line in sys.stdin:
        try:
            command = json.loads(line)
        except ValueError:
            continue
        if isinstance(command, dict) and "set" in command:
            store.set(str(command["set"]), str(command.get("value", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
