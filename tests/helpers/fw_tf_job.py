"""A real TensorFlow ParameterServerStrategy job for the framework tests (needs tensorflow-cpu).

Reads ``TF_CONFIG`` through TensorFlow's own resolver. Workers and parameter servers serve
until stopped; the chief drives ``$TF_STEPS`` steps through a ``ClusterCoordinator`` and
exits 0. Worker ``$TF_KILL_WORKER`` kills itself (SIGKILL) ``$TF_KILL_AFTER`` seconds after its
server started, once (``$TF_KILL_ONCE`` marks it).
"""

import json
import os
import signal
import sys
import threading
import time

import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
role, index = config["task"]["type"], config["task"]["index"]
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
print(f"{role} {index} round {os.environ['TRAINGUARD_RESTART_ROUND']}: {config['cluster']}", flush=True)

if role in ("worker", "ps"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index, protocol="grpc",
                                  start=True)
    once = os.environ.get("TF_KILL_ONCE", "")
    if role == "worker" and index == int(os.environ.get("TF_KILL_WORKER", "-1")) and not os.path.exists(once):
        open(once, "w").close()
        threading.Timer(float(os.environ.get("TF_KILL_AFTER", "5")),
                        lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    server.join()

strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    total = tf.Variable(0.0)


@tf.function
def step():
    total.assign_add(1.0)
    return total.read_value()


steps = int(os.environ.get("TF_STEPS", "100"))
for _ in range(steps):
    coordinator.schedule(step)
    time.sleep(float(os.environ.get("TF_STEP_TIME", "0.1")))
coordinator.join()
print(f"chief: {steps} steps done, total {total.numpy():.0f}", flush=True)
sys.exit(0)
