"""A TensorFlow-style task for framework tests, without TensorFlow: it reads ``TF_CONFIG`` as a
TF program would, records what it was told, then acts its role.

Each start appends ``{"rank", "round", "tf_config", "role", ...}`` to ``$FW_RECORD``. Then the
first rule of ``$FW_PLAN`` (``{"role", "index", "round", "do": "fail"|"kill", "once": PATH,
"after": SECONDS}``) that matches is done; otherwise: ``ps`` and ``evaluator`` serve until stopped, a ``worker``
works ``$FW_WORK`` seconds and leaves a ``worker-N.done`` mark (its round) in ``$FW_DIR``, the
``chief`` waits for every worker's mark of its round or later, and of ``$FW_MIN_ROUND`` or later
(a PS training loop ends when its workers' steps are done).
"""

import json
import os
import signal
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
role, index = config["task"]["type"], config["task"]["index"]
rnd = int(os.environ["TRAINGUARD_RESTART_ROUND"])
with open(os.environ["FW_RECORD"], "a") as out:
    out.write(json.dumps({"rank": int(os.environ["RANK"]), "round": rnd, "tf_config": config,
                          "role": [os.environ["ROLE_NAME"], os.environ["ROLE_RANK"], os.environ["ROLE_WORLD_SIZE"]],
                          "node": os.environ["TRAINGUARD_NODE"]}) + "\n")
print(f"{role} {index} round {rnd}", flush=True)
work = float(os.environ.get("FW_WORK", "0.5"))
for rule in json.loads(os.environ.get("FW_PLAN", "[]")):
    if all(rule.get(k, v) == v for k, v in (("role", role), ("index", index), ("round", rnd))):
        if "once" in rule:
            if os.path.exists(rule["once"]):
                continue
            open(rule["once"], "w").close()
        time.sleep(rule.get("after", work))
        if rule["do"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        print(rule.get("say", "failing"), file=sys.stderr, flush=True)
        sys.exit(1)
marks = os.environ["FW_DIR"]
if role in ("ps", "evaluator"):
    while True:
        time.sleep(60)
if role == "worker":
    time.sleep(work)
    with open(os.path.join(marks, f"worker-{index}.done"), "w") as mark:
        mark.write(str(rnd))
    sys.exit(0)
workers = len(config["cluster"].get("worker", []))


def done(i):
    try:
        with open(os.path.join(marks, f"worker-{i}.done")) as mark:
            return int(mark.read() or -1) >= max(rnd, int(os.environ.get("FW_MIN_ROUND", "0")))
    except OSError:
        return False


deadline = time.time() + 60
while time.time() < deadline:
    if all(done(i) for i in range(workers)):
        print("chief: training done", flush=True)
        sys.exit(0)
    time.sleep(0.1)
sys.exit(3)
