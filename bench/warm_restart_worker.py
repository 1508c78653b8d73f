"""The training script bench/warm_restart.py restarts under each launcher.

``BENCH_JOB=torch``: a small torch job (a gloo process group, all-reduces of 1024 floats).
``BENCH_JOB=hf``: a Hugging Face ``Trainer`` job on a tiny GPT-2 built from a config (no hub
download), random tokens, CPU and gloo.

Each rank appends JSON lines to ``$BENCH_EVENTS``: ``ready`` when training has resumed (the
first all-reduce, or the Trainer's first step), and ``fail`` just before rank 1 is SIGKILLed,
``$BENCH_FAIL_AFTER`` seconds after its start, in every round below ``$BENCH_FAULTS``. The
last line it prints is a retryable NCCL-style error, so both launchers restart it. The round
is ``TORCHELASTIC_RESTART_COUNT``, which torchrun and trainguard both set.
"""

import json
import os
import signal
import sys
import time

STARTED = time.time()
RANK = int(os.environ["RANK"])
ROUND = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
FAILS = ROUND < int(os.environ["BENCH_FAULTS"]) and RANK == 1
FAIL_AT = STARTED + float(os.environ["BENCH_FAIL_AFTER"])


def emit(event):
    with open(os.environ["BENCH_EVENTS"], "a") as out:
        out.write(json.dumps({"event": event, "t": time.time(), "rank": RANK, "round": ROUND}) + "\n")


def maybe_fail():
    if FAILS and time.time() >= FAIL_AT:
        emit("fail")
        print("torch.distributed.DistBackendError: NCCL error in: bench.cpp:1, unhandled system error",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def torch_job():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1024)
    dist.all_reduce(tensor)
    emit("ready")
    steps = 0
    # Rounds with a fault train until the fault; the last one a fixed number of steps, the
    # same on every rank (gloo pairs collectives in order).
    while ROUND < int(os.environ["BENCH_FAULTS"]) or steps < 50:
        dist.all_reduce(tensor)
        time.sleep(0.01)
        steps += 1
        maybe_fail()
    dist.barrier()
    dist.destroy_process_group()


def hf_job():
    import tempfile

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    class Resumed(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                emit("ready")
            maybe_fail()

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(0, config.vocab_size, (4096, 32))
    data = [{"input_ids": row, "labels": row} for row in tokens]
    last = ROUND >= int(os.environ["BENCH_FAULTS"])
    args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="tg-bench-hf-"), per_device_train_batch_size=4,
                             max_steps=20 if last else 100000, use_cpu=True, ddp_backend="gloo", report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[Resumed()]).train()


if __name__ == "__main__":
    {"torch": torch_job, "hf": hf_job}[os.environ["BENCH_JOB"]]()
