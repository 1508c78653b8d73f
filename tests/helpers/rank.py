"""A rank for engine tests: a real process that does what ``TG_PLAN`` says for its round,
rank and node, then records what it saw.

``TG_PLAN`` is a JSON list of rules ``{"round": R, "rank": N, "node": "node-1", "do": ...}``;
missing keys match anything and the first matching rule applies; a rule with ``"once": PATH``
applies only while PATH does not exist, and creates it. ``do`` is one of ``ok``,
``fail`` (print ``say`` to stderr, exit ``code``), ``signal`` (kill itself with ``sig``),
``hang`` (print ``say`` and stop printing), ``sleep`` (``seconds`` then ok), ``chatty-hang``
(keep printing forever), ``chatty`` (print for ``seconds``, then ok). Each start appends one JSON line (its environment counters and pid)
to ``$TG_RECORD``.
"""

import json
import os
import signal
import sys
import time

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
       "TRAINGUARD_JOB_ID", "TRAINGUARD_RESTART_ROUND", "TRAINGUARD_SCHEDULE_COUNT",
       "TRAINGUARD_PROC_START_COUNT", "TRAINGUARD_NODE", "PLUGIN_VAR", "SLURM_STEP_ID", "SLURMD_NODENAME",
       "SLURM_RESTART_COUNT")


def main():
    rank = int(os.environ["RANK"])
    rnd = int(os.environ["TRAINGUARD_RESTART_ROUND"])
    node = os.environ["TRAINGUARD_NODE"]
    record = {k: os.environ.get(k) for k in ENV}
    record["pid"] = os.getpid()
    record["ppid"] = os.getppid()
    with open("/proc/self/cmdline") as cmdline:
        record["cmdline"] = cmdline.read().rstrip("\0").split("\0")
    record["preloaded_json"] = "json" in sys.modules and "json" not in globals()
    with open(os.environ["TG_RECORD"], "a") as out:
        out.write(json.dumps(record) + "\n")
    print(f"rank {rank} round {rnd} on {node}", flush=True)
    rule = {"do": "ok"}
    for candidate in json.loads(os.environ.get("TG_PLAN", "[]")):
        if all(candidate.get(k, v) == v for k, v in (("round", rnd), ("rank", rank), ("node", node))):
            if "once" in candidate:
                if os.path.exists(candidate["once"]):
                    continue
                open(candidate["once"], "w").close()
            rule = candidate
            break
    time.sleep(float(rule.get("after", os.environ.get("TG_WORK", "0.3"))))
    action = rule["do"]
    if action == "fail":
        print(rule.get("say", "failing"), file=sys.stderr, flush=True)
        sys.exit(rule.get("code", 1))
    if action == "signal":
        os.kill(os.getpid(), getattr(signal, rule.get("sig", "SIGSEGV")))
    if action == "hang":
        print(rule.get("say", "hanging"), flush=True)
        while True:
            time.sleep(60)
    if action == "chatty-hang":
        while True:
            print("still working", flush=True)
            time.sleep(0.2)
    if action == "chatty":
        deadline = time.time() + float(rule["seconds"])
        while time.time() < deadline:
            print("working", flush=True)
            time.sleep(0.2)
    if action == "sleep":
        time.sleep(float(rule["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
