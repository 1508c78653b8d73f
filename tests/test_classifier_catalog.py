"""The catalog's knowledge, family by family: messages as their sources document them.

Each row is a line in the wording of the component that prints it (NCCL, the CUDA runtime,
the NVIDIA Xid catalog, the kernel, a shell in some locale, Slurm, Kubernetes, a cloud
provider, PyTorch), not an excerpt of the corpus; the corpus is measured in
``test_classifier_dev.py`` and ``test_classifier_holdout.py``. Also here: what no evidence
means, and that a harmless warning never outranks a process's death.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from trainguard.hooks import PluginHost
from trainguard.model import Category, ErrorSource, Fault
from trainguard.policy import Policy

# The catalog alone: the learned fallback (tested in test_classifier_learned.py) would put its
# guess where these tests assert that no pattern speaks.
HOST = PluginHost(load_entry_points=False, disabled={"learned_classifier"})


def classify(text: str, **fault):
    source = ErrorSource.EXIT_CODE if fault else ErrorSource.LOG
    return HOST.classify(Fault(source, time.time(), **fault), text, Policy())


# (line, category, retryable, fault code)
KNOWLEDGE = [
    # NCCL (ncclResult_t) and PyTorch's ProcessGroupNCCL watchdog and heartbeat monitor
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error "
     "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\nncclSystemError: System call (e.g. socket, "
     "malloc) or external library call failed or device error.", "nccl_error", True, "TG-NCCL-ERROR"),
    ("ncclInternalError: Internal check failed.", "nccl_error", True, "TG-NCCL-ERROR"),
    # what reached torch elastic's agent from outside
    ("[2024-05-01 10:00:00,000] torch.distributed.elastic.agent.server.api: [INFO] Received 15 death signal, "
     "shutting down workers", "node_or_infra", True, "TG-SIGTERM"),
    # NCCL's socket set-up refusing the host as configured: the same launch fails again
    ("node1:12:12 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n"
     "node1:12:12 [0] misc/socket.cc:484 NCCL WARN NET/Socket : No usable listening interface found",
     "nccl_error", False, "TG-NCCL-USAGE"),
    ("node1:7:7 [0] misc/socket.cc:379 NCCL WARN SocketInit: connecting to address  with family 0 is neither "
     "AF_INET(2) nor AF_INET6(10)", "nccl_error", False, "TG-NCCL-USAGE"),
    ("node1:9:40 [1] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported between these "
     "two devices'", "nccl_error", False, "TG-NCCL-USAGE"),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", "nccl_error", True, "TG-NCCL-ERROR"),
    ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
     "nccl_error", True, "TG-NCCL-ERROR"),
    ("NCCL error in: ProcessGroupNCCL.cpp:1269, invalid usage (run with NCCL_DEBUG=WARN for details)\n"
     "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
     "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000", "nccl_error", False, "TG-NCCL-USAGE"),
    ("node1:123:456 [0] NCCL WARN NET/Socket : socket progress error", "nccl_error", True, "TG-NCCL-ERROR"),
    ("[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, "
     "OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800414 milliseconds before timing out.",
     "nccl_timeout", True, "TG-NCCL-TIMEOUT"),
    ("[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 7] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last "
     "completed NCCL work: 0.", "nccl_timeout", True, "TG-NCCL-TIMEOUT"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
     "for recv operation to complete", "nccl_timeout", True, "TG-NCCL-TIMEOUT"),
    ("torch.distributed.DistBackendError: [Rank 3] Exception (either an error or timeout) detected by watchdog "
     "at work: 42, last enqueued NCCL work: 42, last completed NCCL work: 41.", "nccl_timeout", True,
     "TG-NCCL-TIMEOUT"),
    ("[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated after "
     "dumping debug info. workMetaList_.size()=1", "hang_or_stuck", True, "TG-NCCL-HEARTBEAT"),
    ("[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
     "making progress in monitoring enqueued collectives.", "hang_or_stuck", False, "TG-NCCL-WATCHDOG-STUCK"),
    ("[1,0]<stderr>:One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
     "and are waiting for remainder of ranks for more than 60 seconds.", "hang_or_stuck", True, "TG-STALL"),
    # CUDA runtime errors
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "user_code", False,
     "TG-CUDA-ILLEGAL-ADDRESS"),
    ("NCCL WARN Cuda failure 'an illegal memory access was encountered'", "user_code", False,
     "TG-CUDA-ILLEGAL-ADDRESS"),
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d1c8a3e9e0) on address 0x7f2a1c000000. Reason: Page not "
     "present or supervisor privilege.", "user_code", False, "TG-CUDA-ILLEGAL-ADDRESS"),
    ("RuntimeError: CUDA error: unspecified launch failure", "gpu_hardware", True, "TG-GPU-ERROR"),
    ("RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
     "reported", "user_code", False, "TG-CUDA-ASSERT"),
    ("../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: "
     "[5,0,0] Assertion `t >= 0 && t < n_classes` failed.", "user_code", False, "TG-CUDA-ASSERT"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "user_code", False,
     "TG-CUDA-USAGE"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_hardware", True, "TG-GPU-ECC"),
    ("cudaErrorECCUncorrectable", "gpu_hardware", True, "TG-GPU-ECC"),
    ("RuntimeError: CUDA error: system not yet initialized", "node_or_infra", True, "TG-FABRIC-MANAGER"),
    ("NVLink fatal error detected on link 3", "gpu_hardware", True, "TG-GPU-FABRIC"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.", "gpu_hardware", True, "TG-GPU-DRIVER"),
    # NVIDIA Xid catalog: hardware vs application
    ("[ 1234.5] NVRM: Xid (PCI:0000:b1:00): 79, pid=2231, GPU has fallen off the bus.", "gpu_hardware", True,
     "TG-GPU-LOST"),
    ("[ 88.1] NVRM: Xid (PCI:0000:3b:00): 48, pid=771, An uncorrectable double bit error (DBE) has been detected",
     "gpu_hardware", True, "TG-GPU-XID"),
    ("[ 88.1] NVRM: Xid (PCI:0000:3b:00): 64, pid='<unknown>', name=<unknown>, Row Remapper Error",
     "gpu_hardware", True, "TG-GPU-XID"),
    ("[ 88.1] NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=python, NVLink: fatal error detected on link 3",
     "gpu_hardware", True, "TG-GPU-XID"),
    ("[ 77.0] NVRM: Xid (PCI:0000:1a:00): 31, pid=4242, name=python, Ch 00000008, intr 10000000. MMU Fault",
     "user_code", False, "TG-GPU-XID-APP"),
    ("[ 77.0] NVRM: Xid (PCI:0000:1a:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1)",
     "user_code", False, "TG-GPU-XID-APP"),
    ("Row remapping failed on GPU 00000000:3B:00.0", "gpu_hardware", True, "TG-GPU-ECC"),
    # device vs host memory
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
     "79.10 GiB of which 1.19 GiB is free.", "cuda_oom", False, "TG-CUDA-OOM"),
    ("torch.cuda.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 MiB", "cuda_oom", False,
     "TG-CUDA-OOM"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: you "
     "tried to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)", "host_oom", False,
     "TG-HOST-ENOMEM"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[1024,1024,512] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
     "host_oom", False, "TG-HOST-ENOMEM"),
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 37.3 GiB for an array with shape (50000, "
     "100000) and data type float64", "host_oom", False, "TG-HOST-ENOMEM"),
    ("MemoryError", "host_oom", False, "TG-HOST-ENOMEM"),
    # the OOM killer in every form
    ("[4810.1] Out of memory: Killed process 41203 (python) total-vm:98234560kB, anon-rss:63817224kB",
     "host_oom", False, "TG-HOST-OOM"),
    ("[4810.1] Memory cgroup out of memory: Killed process 1234 (pt_main_thread)", "host_oom", False,
     "TG-HOST-OOM"),
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "host_oom", False, "TG-HOST-OOM-CGROUP"),
    ("train.sh: line 12: 31337 Killed                  python train.py", "host_oom", False, "TG-SIGKILL"),
    ("train.sh: Zeile 12: 31337 Getötet                 python train.py", "host_oom", False, "TG-SIGKILL"),
    ("train.sh : ligne 12 : 31337 Processus arrêté         python train.py", "host_oom", False, "TG-SIGKILL"),
    ("train.sh: línea 12: 31337 Terminado (killed)      python train.py", "host_oom", False, "TG-SIGKILL"),
    ("train.sh: 行 12: 31337 已杀死                  python train.py", "host_oom", False, "TG-SIGKILL"),
    ("train.sh: 行 12: 31337 強制終了                python train.py", "host_oom", False, "TG-SIGKILL"),
    ("train.sh: строка 12: 31337 Убито              python train.py", "host_oom", False, "TG-SIGKILL"),
    ("torch.distributed.elastic.multiprocessing.api:[WARNING] Signal 9 (SIGKILL) received by PID 1234",
     "host_oom", False, "TG-SIGKILL"),
    ("Last State: Terminated\n  Reason: OOMKilled\n  Exit Code: 137", "host_oom", False, "TG-K8S-OOMKILLED"),
    ("[trainguard] pod job-1-r0 on node node-2: terminated reason=OOMKilled exitCode=137", "host_oom", False,
     "TG-K8S-OOMKILLED"),
    ("[trainguard] pod job-1-r0 on node node-1: status reason=NodeLost: Node node-1 which was running pod "
     "job-1-r0 is unresponsive", "node_or_infra", True, "TG-NODE-EVENT"),
    ("Warning  Evicted  kubelet  The node was low on resource: memory. Threshold quantity: 100Mi",
     "host_oom", True, "TG-HOST-OOM-EVICTED"),
    ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.", "host_oom", False,
     "TG-HOST-ENOMEM"),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
     "segfault_or_signal", False, "TG-WORKER-CRASH"),
    # cloud and scheduler preemption, termination, limits
    ('{"action": "terminate", "time": "2024-05-01T12:00:00Z"} from /latest/meta-data/spot/instance-action',
     "node_or_infra", True, "TG-PREEMPTED"),
    ("EC2 Spot Instance Interruption Warning for i-0abc", "node_or_infra", True, "TG-PREEMPTED"),
    ("Instance was preempted.", "node_or_infra", True, "TG-PREEMPTED"),
    ('{"EventId": "A1", "EventType": "Preempt", "ResourceType": "VirtualMachine"}', "node_or_infra", True,
     "TG-PREEMPTED"),
    ("slurmstepd: error: *** JOB 77 ON gpu12 CANCELLED AT 2024-01-01T00:00:00 DUE TO PREEMPTION ***",
     "node_or_infra", True, "TG-PREEMPTED"),
    ("slurmstepd: error: *** JOB 77 ON gpu12 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***",
     "node_or_infra", True, "TG-TIME-LIMIT"),
    ("srun: error: Node failure on gpu12", "node_or_infra", True, "TG-NODE-FAIL"),
    ("slurmstepd: error: *** JOB 77 ON gpu12 CANCELLED AT 2024-01-01T00:00:00 ***", "node_or_infra", False,
     "TG-CANCELLED"),
    ("Warning  NodeNotReady  pod/trainer-0  Node is not ready", "node_or_infra", True, "TG-NODE-EVENT"),
    ("Conditions: DisruptionTarget True  reason: DeletionByTaintManager", "node_or_infra", True,
     "TG-K8S-DISRUPTION"),
    ("Warning  Evicted  kubelet  The node was low on resource: ephemeral-storage.", "node_or_infra", True,
     "TG-K8S-EVICTED"),
    ("Warning  UnexpectedAdmissionError  Allocate failed due to requested number of devices unavailable for "
     "nvidia.com/gpu", "node_or_infra", True, "TG-K8S-ADMISSION"),
    ("Normal  Preempting  pod/trainer-3  Preempted by default/inference-7 on node gpu-4", "node_or_infra", True,
     "TG-K8S-PREEMPTED"),
    ("Warning  FailedScheduling  0/8 nodes are available: 8 Insufficient nvidia.com/gpu.", "node_or_infra", True,
     "TG-K8S-UNSCHEDULABLE"),
    ('Warning  Failed  Failed to pull image "registry/trainer:v9": manifest unknown\nErrImagePull',
     "user_code", False, "TG-K8S-CONFIG"),
    ("torch.distributed.elastic.agent.server.api:Received Signals.SIGTERM death signal, shutting down workers",
     "node_or_infra", True, "TG-SIGTERM"),
    ("run.sh: line 4: 1234 Terminated              python train.py", "node_or_infra", True, "TG-SIGTERM"),
    ("    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    1", "user_code", False,
     "TG-CHILD-FAILED"),
    # Slurm launcher and controller
    ("srun: error: Unable to contact slurm controller (connect failure)", "node_or_infra", True,
     "TG-SLURM-CONTROLLER"),
    ("srun: error: Socket timed out on send/recv operation", "node_or_infra", True, "TG-SLURM-CONTROLLER"),
    ("srun: Job 42 step creation temporarily disabled, retrying (Requested nodes are busy)", "node_or_infra", True,
     "TG-SLURM-STEP-CREATE"),
    ("srun: error: Unable to create step for job 42: Memory required by task is not available", "node_or_infra",
     True, "TG-SLURM-STEP-CREATE"),
    ("slurmstepd: error: execve(): python: No such file or directory", "user_code", False,
     "TG-CMD-NOT-FOUND"),
    ("[gpu3:01234] PMIX ERROR: pmix_server_setup failed", "node_or_infra", True, "TG-SLURM-STEP-LAUNCH"),
    # storage and network
    ("OSError: [Errno 116] Stale file handle: '/lustre/ckpt/step_100.pt'", "node_or_infra", True, "TG-IO-ERROR"),
    ("OSError: [Errno 5] Input/output error", "node_or_infra", True, "TG-IO-ERROR"),
    ("kernel: nfs: server filer01 not responding, still trying", "node_or_infra", True, "TG-IO-ERROR"),
    ("LustreError: 11-0: scratch-OST0003-osc: operation ost_read to node 10.0.0.3@o2ib failed: rc = -107",
     "node_or_infra", True, "TG-IO-ERROR"),
    ("OSError: [Errno 107] Transport endpoint is not connected", "node_or_infra", True, "TG-IO-ERROR"),
    ("OSError: [Errno 28] No space left on device", "node_or_infra", False, "TG-DISK-FULL"),
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
     "exceeded with url: /api/models", "node_or_infra", True, "TG-NETWORK"),
    ("RuntimeError: The server socket has failed to listen on any local network address. "
     "[::]:29500 (errno: 98 - Address already in use)", "node_or_infra", True, "TG-RENDEZVOUS"),
    # numerical divergence: the run's own maths
    ("{'loss': nan, 'learning_rate': 1.9e-05, 'epoch': 0.42}", "user_code", False, "TG-LOSS-NAN"),
    ("step 1200 | loss inf | lr 3e-4", "user_code", False, "TG-LOSS-NAN"),
    ("Epoch 3: 100%|██████████| 50/50 [00:10<00:00, train_loss=nan, val_loss=nan]", "user_code", False,
     "TG-LOSS-NAN"),
    ("{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 2e-05, 'epoch': 0.1}", "user_code", False, "TG-LOSS-NAN"),
    ("FloatingPointError: Loss became infinite or NaN at iteration=1234!", "user_code", False, "TG-LOSS-NAN"),
    ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
     "user_code", False, "TG-LOSS-NAN"),
    ("RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.", "user_code", False,
     "TG-LOSS-NAN"),
    # import, argument and config errors; exceptions
    ("ModuleNotFoundError: No module named 'flash_attn'", "user_code", False, "TG-USER-CONFIG"),
    ("train.py: error: unrecognized arguments: --lr_sched cosine", "user_code", False, "TG-USER-CONFIG"),
    ("python: can't open file '/workspace/trian.py': [Errno 2] No such file or directory", "user_code", False,
     "TG-USER-CONFIG"),
    ("RuntimeError: Error(s) in loading state_dict for Model:\n\tsize mismatch for head.weight: copying a param "
     "with shape torch.Size([10, 512]) from checkpoint", "user_code", False, "TG-USER-CONFIG"),
    ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\n"
     "ValueError: too many values to unpack (expected 2)", "user_code", False, "TG-USER-EXCEPTION"),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\ntrain.py FAILED\n  exitcode  : 1 (pid: 12)",
     "user_code", False, "TG-USER-EXCEPTION"),
    # fatal signals
    ("Fatal Python error: Segmentation fault", "segfault_or_signal", False, "TG-SIGSEGV-LIB"),
    ("run.sh: Zeile 3: 4242 Speicherzugriffsfehler  (Speicherabzug geschrieben) python train.py",
     "segfault_or_signal", False, "TG-SIGSEGV-LIB"),
    ("  exitcode  : -11 (pid: 1234)", "segfault_or_signal", True, "TG-SIGSEGV"),
    # NCCL's start-up notices on a host without InfiniBand or a net plugin are not errors
    ("host:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
     "host:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>", "hang_or_stuck", True, "TG-NCCL-INIT-STALL"),
    ("host:1:1 [0] NCCL WARN NET/IBext : Got completion from peer 10.0.0.3<4242> with status=12 opcode=0 len=0 "
     "vendor err 129 (Recv)", "nccl_error", True, "TG-NCCL-ERROR"),
    ("host:1:2 [0] NCCL INFO Channel 00/02 :    0   1\nhost:1:2 [0] NCCL INFO transport/net_socket.cc:336 -> 2\n"
     "host:1:2 [0] NCCL INFO init.cc:1089 -> 2 [Async thread]", "nccl_error", True, "TG-NCCL-ERROR"),
    # name resolution (getaddrinfo EAI_NONAME / EAI_AGAIN), not torchrun's harmless IPv6 notice
    ("ValueError: host not found: Name or service not known", "node_or_infra", True, "TG-RENDEZVOUS"),
    ("socket.gaierror: [Errno -3] Temporary failure in name resolution", "node_or_infra", True, "TG-RENDEZVOUS"),
    ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (node1, 29500) cannot be retrieved (gai error: -2 - "
     "Name or service not known).", "success_or_benign", True, "TG-BENIGN"),
    # the c10d store's master: ranks that never joined
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 2/4 clients joined.",
     "node_or_infra", True, "TG-RENDEZVOUS"),
    # network clients' exception classes and socket errnos
    ("urllib3.exceptions.NewConnectionError: <urllib3.connection.HTTPSConnection object>: Failed to establish a new "
     "connection: [Errno 111] Connection refused", "node_or_infra", True, "TG-NETWORK"),
    ("wandb: ERROR Error while calling W&B API: An internal error occurred. (<Response [502]>)", "node_or_infra",
     True, "TG-NETWORK"),
    # schedulers and clouds: LSF termination reasons, PBS/YARN memory limits, capacity, shutdown notices
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "node_or_infra", True, "TG-TIME-LIMIT"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "host_oom", False, "TG-HOST-OOM-CGROUP"),
    ("TERM_PREEMPT: job killed after preemption.", "node_or_infra", True, "TG-PREEMPTED"),
    ("Container killed by YARN for exceeding memory limits. 10.4 GB of 10 GB physical memory used.", "host_oom",
     False, "TG-HOST-OOM-CGROUP"),
    # only the step, no one named: torn down under the job (a requeue, srun after another task failed)
    ("slurmstepd: error: *** STEP 1234.0 ON gpu01 CANCELLED AT 2024-05-01T10:00:00 ***", "node_or_infra", True,
     "TG-SLURM-STEP-CANCELLED"),
    # ... while the job's own line says it was cancelled as a whole
    ("slurmstepd: error: *** STEP 1234.0 ON gpu01 CANCELLED AT 2024-05-01T10:00:00 ***\n"
     "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2024-05-01T10:00:00 ***", "node_or_infra", False,
     "TG-CANCELLED"),
    ("squeue: error: fetch_config: DNS SRV lookup failed", "node_or_infra", True, "TG-SLURM-CONTROLLER"),
    ("GCP Metadata Service says termination is imminent", "node_or_infra", True, "TG-PREEMPTED"),
    ("Error: Insufficient GPU capacity in zone us-central1-a", "node_or_infra", True, "TG-PREEMPTED"),
    ("Pod was terminated in response to imminent node shutdown.", "node_or_infra", True, "TG-NODE-LOST"),
    ("NAME     STATUS     ROLES    AGE   VERSION\ngpu-node-7   NotReady   <none>   12d   v1.29.1", "node_or_infra", True,
     "TG-NODE-EVENT"),
    ("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n1234 gpu train me PD 0:00 2 (ReqNodeNotAvail, "
     "UnavailableNodes:gpu[01-02])", "node_or_infra", True, "TG-NODE-FAIL"),
    ("ray.exceptions.NodeDiedError: Task failed due to the node dying.", "node_or_infra", True, "TG-NODE-LOST"),
    ("A process or daemon was unable to complete a TCP connection to another process:\n  Local host: node1\n"
     "  Remote host: node2", "node_or_infra", True, "TG-NODE-LOST"),
    # launchers and IDEs report signals and exit codes in their own words
    ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "host_oom", False, "TG-SIGKILL"),
    ("The replica workerpool0-0 exited with a non-zero status of 137.", "host_oom", False, "TG-SIGKILL"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV",
     "segfault_or_signal", True, "TG-SIGSEGV"),
    ("Process finished with exit code -1073741819 (0xC0000005)", "segfault_or_signal", False, "TG-SIGSEGV-LIB"),
    ("Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -7 (pid: 3112)\n"
     "Root Cause (first observed failure):\n[0]:\n  exitcode  : -7 (pid: 3111)", "segfault_or_signal", False,
     "TG-SIGBUS-ALL"),
    ("ERROR: Job failed: exit code 1", "user_code", False, "TG-CHILD-FAILED"),
    # a bus error: neither the launcher's report nor the process's own (or its shell's) is retried
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 1 (pid: 77)",
     "segfault_or_signal", False, "TG-SIGBUS"),
    ("  traceback : Signal 7 (SIGBUS) received by PID 3112", "segfault_or_signal", False, "TG-SIGBUS"),
    ("*** SIGBUS received at time=1700000000 on cpu 3 ***\nPC: @ 0x7f00  (unknown)", "segfault_or_signal", False,
     "TG-SIGBUS-LIB"),
    ("run.sh: line 4: 2211 Bus error               (core dumped) python train.py", "segfault_or_signal", False,
     "TG-SIGBUS-LIB"),
    # EIO whatever its message; a transport error translated by httpx
    ("OSError: [Errno 5] Can't read data (file read failed)", "node_or_infra", True, "TG-IO-ERROR"),
    # a command that is not there is the job's; slurmd's own spool script missing is the node's
    ("slurmstepd: error: execve(): torchrun: No such file or directory", "user_code", False, "TG-CMD-NOT-FOUND"),
    ("slurmstepd: error: execve(): ./train.sh: Permission denied", "user_code", False, "TG-NOT-EXECUTABLE"),
    ("slurmstepd: error: execve(): /var/spool/slurmd/job42/slurm_script: No such file or directory", "node_or_infra",
     True, "TG-SLURM-STEP-LAUNCH"),
    # heap corruption is the process's bug; a bare Aborted from a shell is retried
    ("free(): corrupted unsorted chunks\n[host:1234] *** Process received signal ***\n[host:1234] Signal: Aborted (6)",
     "segfault_or_signal", False, "TG-SIGABRT-BUG"),
    ("run.sh: line 12: 4242 Aborted                 (core dumped) python train.py", "segfault_or_signal", True,
     "TG-SIGABRT"),
    ("Failed to modify QP to RTR: Connection timed out\nerrno: 110", "nccl_error", True, "TG-COMM-ERROR"),
    # an abort the process reports itself; glibc's crash report; XLA's TPU allocator; NCCL's unwind of invalid usage
    ("*** SIGABRT received by PID 545434 (TID 545434) on cpu 25 from PID 545434; stack trace: ***\n"
     "PC: @     0x7fcf5129603b  (unknown)  raise", "segfault_or_signal", False, "TG-SIGABRT-BUG"),
    ("7f61c4000000-7f61c7f37000 rw-p 00000000 00:00 0 \n7f61c7f37000-7f61c8000000 ---p 00000000 00:00 0 ",
     "segfault_or_signal", False, "TG-SIGABRT-BUG"),
    ("RuntimeError: Resource exhausted: From /job:tpu_worker/replica:0/task:0:\nAttempting to reserve 3.95G at the "
     "bottom of memory. That was not possible. There are 1.92G free, 0B reserved, and 1.92G reservable.", "cuda_oom",
     False, "TG-CUDA-OOM"),
    ("host:1203254:1203254 [0] NCCL INFO init.cc:1577 -> 4", "nccl_error", False, "TG-NCCL-USAGE"),
    ("2020-04-09 18:55:47.184402: I tensorflow/stream_executor/cuda/cuda_driver.cc:830] failed to allocate 3.74G "
     "(4011998976 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory", "cuda_oom", False, "TG-CUDA-OOM"),
    ("RuntimeError: CUDA error: out of memory", "cuda_oom", True, "TG-CUDA-DRIVER-OOM"),
    ("host:1203254:1203254 [0] NCCL INFO transport/net_ib.cc:912 -> 2", "nccl_error", True, "TG-NCCL-ERROR"),
    ("[I socket.cpp:605] [c10d] The server socket has started to listen on [::]:5972.\n"
     "[I TCPStore.cpp:342] [c10d - debug] TCP client connected to host localhost:5972", "hang_or_stuck", True,
     "TG-START-STALL"),
    ("[INFO|trainer.py:4645] >> Dropping the following result as it does not have all the necessary fields:",
     "success_or_benign", True, "TG-BENIGN"),
    ("2022-02-18 00:38:30,706 [INFO] Epoch 5, Time 4981.4s, Loss 0.5731, LR 0.1111", "success_or_benign", True,
     "TG-PROGRESS"),
    # a Ray process gone with no error of its own; Horovod task servers that never register
    ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.", "node_or_infra", True,
     "TG-NODE-LOST"),
    ("Exception: Timed out waiting for tasks to start. Please check connectivity between servers.", "node_or_infra",
     True, "TG-RENDEZVOUS"),
    ("trial failed: container failed with non-zero exit code: 137 (exit code 137)", "host_oom", False, "TG-SIGKILL"),
    # finished runs: every Ray Tune trial TERMINATED, fairseq's last line
    ("== Status ==\nNumber of trials: 2 ({'TERMINATED': 2})", "success_or_benign", True, "TG-BENIGN"),
    ("Number of trials: 4/4 (4 TERMINATED)", "success_or_benign", True, "TG-BENIGN"),
    ("2020-08-12 13:52:25 | INFO | fairseq_cli.train | done training in 812.4 seconds", "success_or_benign", True,
     "TG-BENIGN"),
    ("Traceback (most recent call last):\n  File \"/v/httpx/_transports/default.py\", line 101, in "
     "map_httpcore_exceptions\n    yield", "node_or_infra", True, "TG-NETWORK"),
    # host memory named by other runtimes; a GPU driver that cannot start
    ("java.lang.OutOfMemoryError: Java heap space", "host_oom", False, "TG-HOST-ENOMEM"),
    ("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.", "gpu_hardware", True,
     "TG-GPU-DRIVER"),
    # hangs named by the job's own detectors
    ("[NVRx] Hang detected on rank 12: no progress reported for 600 s", "hang_or_stuck", True, "TG-STALL"),
    ("torch.distributed.elastic.timer.local_timer: Reaping worker 4242: timer expired", "hang_or_stuck", True,
     "TG-STALL"),
    ("I0101 10:00:00.0 cross_device_ops.py:897] batch_all_reduce: 369 all-reduces with algorithm = nccl, "
     "num_packs = 1", "hang_or_stuck", True, "TG-START-STALL"),
    # divergence and compiler errors are the program's
    ("Training stopped: loss diverged at step 1200", "user_code", False, "TG-LOSS-NAN"),
    ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:", "user_code", False, "TG-USER-CONFIG"),
    # a DeepSpeed memory-pressure notice is a warning, not a kubelet eviction
    ("[WARNING] [stage3.py:1850:step] 3 pytorch allocator cache flushes since last step. this happens when there is "
     "high memory pressure", "success_or_benign", True, "TG-BENIGN"),
    ("{'loss': 1.2345, 'learning_rate': 1.9e-05, 'epoch': 0.5}", "success_or_benign", True, "TG-PROGRESS"),
    ("=== EPOCH 12/50 ===\nLoss train: 0.073  eval: 0.069", "success_or_benign", True, "TG-PROGRESS"),
    ("Train Epoch: 3 [12800/60000 (21%)]", "success_or_benign", True, "TG-PROGRESS"),
    # Kubernetes container states as `kubectl describe` prints them
    ("Last State:  Terminated\n  Reason:  Error\n  Exit Code:  139", "segfault_or_signal", True, "TG-SIGSEGV"),
    ("Last State:  Terminated\n  Reason:  Error\n  Exit Code:  143", "node_or_infra", True, "TG-SIGTERM"),
    ("Error: container has runAsNonRoot and image will run as root", "user_code", False, "TG-K8S-CONFIG"),
    ("NVIDIA GeForce RTX 4090 with CUDA capability sm_89 is not compatible with the current PyTorch installation.",
     "user_code", False, "TG-CUDA-USAGE"),
    ("azure.core.exceptions.ServiceRequestError: <urllib3.connection.HTTPSConnection object>: Failed to establish a "
     "new connection: [Errno -3] Temporary failure in name resolution", "node_or_infra", True, "TG-RENDEZVOUS"),
    # the operator stopped a run that showed no error: what people do to a stalled job
    ("[INFO] [comm.py:622:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl\n"
     "^CWARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
     "hang_or_stuck", True, "TG-INTERRUPTED-STALL"),
    ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\n"
     "KeyboardInterrupt", "hang_or_stuck", True, "TG-INTERRUPTED-STALL"),
    ("initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8\ninitializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8\n"
     "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8", "hang_or_stuck", False, "TG-INIT-STALL"),
    ("initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8\ninitializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
     "hang_or_stuck", True, "TG-START-STALL"),
    ("(raylet) worker_pool.cc:592: Some workers of the worker process(4242) have not registered within the timeout. "
     "The process is still alive, probably it's hanging during start.", "hang_or_stuck", True, "TG-STALL"),
    # healthy runs: HF/accelerate notices, DeepSpeed's step line, W&B's finish
    ("Detected kernel version 5.4.0, which is below the recommended minimum of 5.5.0; this can cause the process "
     "to hang.", "success_or_benign", True, "TG-BENIGN"),
    ("[INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]",
     "success_or_benign", True, "TG-PROGRESS"),
    ("wandb: Waiting for W&B process to finish... (success).\nwandb: Run history:", "success_or_benign", True,
     "TG-BENIGN"),
    # benign: positive evidence only
    ("[W reducer.cpp:1303] Warning: find_unused_parameters=True was specified in DDP constructor",
     "success_or_benign", True, "TG-BENIGN"),
    ("{'train_runtime': 1234.5, 'train_samples_per_second': 8.1, 'epoch': 3.0}", "success_or_benign", True,
     "TG-BENIGN"),
    ("Epoch 4: 100%|██████████| 195/195 [01:58<00:00,  1.64it/s, loss=0.391]", "success_or_benign", True,
     "TG-PROGRESS"),
    # since tune26: a hangup, ssh that cannot log in, a store on port 0, NCCL's unwind before the
    # "failed or timed out" it causes, numbered CUDA errors, Python's own socket reset, Ray Train
    ("W1102 torch/distributed/elastic/agent/server/api.py:704] Received 1 death signal, shutting down workers\n"
     "W1102 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4242 closing signal SIGHUP",
     "segfault_or_signal", True, "TG-SIGHUP"),
    ("nohup: ignoring input\ntrain.sh: line 9:  4242 Hangup                  python train.py", "segfault_or_signal",
     True, "TG-SIGHUP"),
    ("gpu-node-2: Permission denied (publickey,gssapi-keyex,gssapi-with-mic).\n"
     "ORTE was unable to reliably start one or more daemons.", "node_or_infra", False, "TG-SSH-SETUP"),
    ("Host key verification failed.\npdsh@head: gpu-node-3: ssh exited with exit code 255", "node_or_infra", False,
     "TG-SSH-SETUP"),
    ("subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no 10.0.0.7 hostname' returned non-zero "
     "exit status 255.", "node_or_infra", False, "TG-SSH-SETUP"),
    ("[W socket.cpp:663] [c10d] The client socket has failed to connect to [gpu-1]:0 (errno: 111 - Connection "
     "refused).\n[E socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to connect to "
     "(gpu-1, 0).", "node_or_infra", False, "TG-RENDEZVOUS-CONFIG"),
    ("node1:4242:4300 [0] NCCL INFO misc/socket.cc:50 -> 3\nnode1:4242:4300 [0] NCCL INFO transport/net.cc:870 -> 3\n"
     "[rank0]:[E1102 ProcessGroupNCCL.cpp:684] [Rank 0] Some NCCL operations have failed or timed out. Due to the "
     "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
     "nccl_error", True, "TG-NCCL-ERROR"),
    ("[2025-01-02 10:00:01] Error: CUDA error 999 'unknown error' - src/tensors/gpu/algorithm.cu:54: "
     "cudaStreamSynchronize(0)", "gpu_hardware", True, "TG-GPU-ERROR"),
    ("OSError: Connection reset by peer", "node_or_infra", True, "TG-NETWORK"),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "node_or_infra", True, "TG-NETWORK"),
    ("Trial TorchTrainer_1a2b3_00000 completed training after 10 iterations at 2024-05-01 10:00:00. "
     "Total running time: 1min 3s", "success_or_benign", True, "TG-BENIGN"),
    # since tune27: other accelerators, other launchers, TensorFlow's cluster, prompts
    ("RuntimeError: [Rank:3] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::1073741824 (1024)MB",
     "cuda_oom", False, "TG-CUDA-OOM"),
    ("EE9999 The error from device(chipId:1, dieId:0), serial number is 7, event wait timeout occurred during "
     "task execution, stream_id:12, sq_id:12, task_id:90, event_id=3, timeout=1800.", "nccl_timeout", True,
     "TG-NCCL-TIMEOUT"),
    ("RuntimeError: Aborted: Session 0f3a9c2b11d04e77 is not found.", "node_or_infra", True, "TG-NODE-LOST"),
    ("OSError: (External) Cuda error(719), unspecified launch failure.", "gpu_hardware", True, "TG-GPU-ERROR"),
    ("LAUNCH ERROR 2024-05-01 10:00:00,000 Container failed !!!\nContainer rank 1 status failed cmd ['python', "
     "'-u', 'train.py'] code -9 log ./log/workerlog.1", "host_oom", False, "TG-SIGKILL"),
    ("FatalError: A serious error (Termination signal) is detected by the operating system. (at "
     "/paddle/paddle/fluid/platform/init.cc:303)", "node_or_infra", True, "TG-SIGTERM"),
    ("*** Aborted at 1700000000 (unix time) try \"date -d @1700000000\" if you are using GNU date ***\n"
     "*** SIGABRT (@0x3e800001a2b) received by PID 6699 (TID 0x7f00) from PID 6699; stack trace: ***",
     "segfault_or_signal", False, "TG-SIGABRT-BUG"),
    ("I tensorflow/core/distributed_runtime/master.cc:267] CreateSession still waiting for response from worker: "
     "/job:worker/replica:0/task:1", "hang_or_stuck", True, "TG-START-STALL"),
    ("INFO:tensorflow:An error was raised. This may be due to a preemption in a connected worker or parameter "
     "server. The current session will be closed and a new session will be created.", "node_or_infra", True,
     "TG-NODE-LOST"),
    ("InternalError: Error writing (tmp) checkpoint file: /ckpt/model.ckpt-100.tempstate42: Resource exhausted: "
     "/ckpt/model.ckpt-100.tempstate42", "node_or_infra", False, "TG-DISK-FULL"),
    ("wandb: (1) Create a W&B account\nwandb: (2) Use an existing W&B account\nwandb: (3) Don't visualize my "
     "results\nwandb: Enter your choice:", "hang_or_stuck", False, "TG-INPUT-PROMPT"),
    ("The repository for my-model contains custom code which must be executed to correctly load the model.\n"
     "Do you wish to run the custom code? [y/N]", "hang_or_stuck", False, "TG-INPUT-PROMPT"),
    ("RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
     "store by key '0', but store->get('0') got error: Socket Timeout", "node_or_infra", True, "TG-RENDEZVOUS"),
    ("ssh: Could not resolve hostname trainer-worker-0.trainer-worker: Name or service not known",
     "node_or_infra", True, "TG-RENDEZVOUS"),
    ("I1124 10:00:00.000 torch/distributed/elastic/agent/server/api.py:879] [default] Starting worker group",
     "hang_or_stuck", True, "TG-START-STALL"),
    ("terminate called after throwing an instance of 'c10::Error'\n  what():  [Rank:0] FATAL ERROR :: "
     "MODULE:PT_DEVICE GRAPH:: Capture must end on the same stream it began on.\nAborted (core dumped)",
     "user_code", False, "TG-CUDA-USAGE"),
]


# Widened vocabularies (issue 13 item 2), family by family, in the words of the source that
# prints them: (line, category, retryable, node fault, fault code).
WIDENED = [
    # PyTorch ProcessGroupNCCL: watchdog, flight recorder and desync report (ProcessGroupNCCL.cpp,
    # TraceUtils.h), and c10d's monitored barrier (ProcessGroupGloo.cpp)
    ("[rank0]:[E1001 10:00:00.1 ProcessGroupNCCL.cpp:1858] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a "
     "dump signal due to a collective timeout from  rank 3 and we will try our best to dump the debug info.",
     "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    ("[PG ID 0 PG GUID 0 Rank 2] Work timeout is detected by watchdog at work: 17, last enqueued NCCL work: 17, "
     "last completed NCCL work: 16.", "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    ("[rank1]:[E1001 ProcessGroupNCCL.cpp:1794] [PG ID 0 PG GUID 0(default_pg) Rank 1] Observed flight recorder "
     "dump signal from another rank via TCPStore.", "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    ("[PG ID 0 PG GUID 0 Rank 2] NCCL error is detected by watchdog at work: 17, last enqueued NCCL work: 17, "
     "last completed NCCL work: 16.", "nccl_error", True, False, "TG-NCCL-ERROR"),
    ("RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 30000 ms", "hang_or_stuck", True, False,
     "TG-STALL"),
    # RDMA verbs providers and MPI transports
    ("mlx5: node3: got completion with error:\n00000000 00000000 00000000 00000000", "nccl_error", True, False,
     "TG-COMM-ERROR"),
    ("The InfiniBand retry count between two MPI processes has been exceeded.", "nccl_error", True, False,
     "TG-COMM-ERROR"),
    # CUDA runtime error names (cudaError_t): the node's driver vs the program's build
    ("RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination", "gpu_hardware",
     True, True, "TG-GPU-DRIVER"),
    ("RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.", "user_code", False,
     False, "TG-CUDA-USAGE"),
    ("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x65:1457)", "gpu_hardware", True, True, "TG-GPU-LOST"),
    # Xid catalog: contained/uncontained ECC and GSP timeouts are hardware; 43 is the application's
    ("NVRM: Xid (PCI:0000:3b:00): 94, pid=1234, name=python, Contained: SM (0x1). RST: No, D-RST: No",
     "gpu_hardware", True, True, "TG-GPU-XID"),
    ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
     "gpu_hardware", True, True, "TG-GPU-XID"),
    ("NVRM: Xid (PCI:0000:3b:00): 43, pid=1234, name=python, Ch 00000010", "user_code", False, False,
     "TG-GPU-XID-APP"),
    # nvidia-smi -q: row remapping failed
    ("Remapped Rows\n        Uncorrectable Error               : 1\n        Pending                           : Yes\n"
     "        Remapping Failure Occurred        : Yes", "gpu_hardware", True, True, "TG-GPU-ECC"),
    # the OOM killer's user-space relatives; shells of other kinds and locales
    ("systemd-oomd[812]: Killed /user.slice/user-1000.slice/session-3.scope due to memory pressure for "
     "/user.slice being 92.1% > 80.0% for > 20s with reclaim activity", "host_oom", False, False, "TG-HOST-OOM"),
    ("earlyoom: low memory! at or below SIGKILL limits: mem 2.00%, swap 5.00%", "host_oom", False, False,
     "TG-HOST-OOM"),
    ("zsh: killed     python train.py", "host_oom", False, False, "TG-SIGKILL"),
    ("fish: Job 1, 'python train.py' terminated by signal SIGKILL (Forced quit)", "host_oom", False, False,
     "TG-SIGKILL"),
    ("train.sh: riga 12: 31337 Ucciso                  python train.py", "host_oom", False, False, "TG-SIGKILL"),
    ("train.sh: linha 12: 31337 Morto                   python train.py", "host_oom", False, False, "TG-SIGKILL"),
    ("[1]+  Dödad                   python train.py", "host_oom", False, False, "TG-SIGKILL"),
    ("train.sh: 列 12: 31337 強制結束                python train.py", "host_oom", False, False, "TG-SIGKILL"),
    ("run.sh: linha 3: 4242 Falha de segmentação (imagem do núcleo gravada) python train.py",
     "segfault_or_signal", False, False, "TG-SIGSEGV-LIB"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed.",
     "host_oom", False, False, "TG-HOST-OOM-CGROUP"),
    ("TERM_SWAP: job killed after reaching process swap limit.", "host_oom", False, False, "TG-HOST-OOM-CGROUP"),
    ("OSError: [WinError 1455] The paging file is too small for this operation to complete", "host_oom", False,
     False, "TG-HOST-ENOMEM"),
    # device memory in other frameworks' allocators
    ("RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.20 GB, max allowed: "
     "18.13 GB).", "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:456] Allocator (GPU_0_bfc) ran out of memory trying to "
     "allocate 2.00GiB (rounded to 2147483648)", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # clouds and schedulers
    ("Host EC2 (instance i-0123456789abcdef0) terminated.", "node_or_infra", True, False, "TG-PREEMPTED"),
    ("compute.instances.hostError: Instance terminated by Compute Engine due to a host error", "node_or_infra",
     True, False, "TG-PREEMPTED"),
    ("Preempted to accommodate a higher priority Workload", "node_or_infra", True, False, "TG-K8S-PREEMPTED"),
    ("Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, capacity: 8",
     "node_or_infra", True, True, "TG-K8S-ADMISSION"),
    ("ContainerStatusUnknown: The container could not be located when the pod was terminated", "node_or_infra",
     True, False, "TG-NODE-LOST"),
    ("slurmstepd: error: *** JOB 123 ON gpu4 CANCELLED AT 2024-01-01T00:00:00 DUE TO JOB REQUEUE ***",
     "node_or_infra", True, False, "TG-PREEMPTED"),
    ("slurmstepd: error: *** JOB 123 ON gpu4 CANCELLED AT 2024-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD "
     "LOG FOR DETAILS ***", "node_or_infra", True, True, "TG-NODE-FAIL"),
    ("TERM_OWNER: job killed by owner.", "node_or_infra", False, False, "TG-CANCELLED"),
    ("TERM_DEADLINE: job killed after deadline expires.", "node_or_infra", True, False, "TG-TIME-LIMIT"),
    # storage and network
    ("OSError: [Errno 116] Stale NFS file handle", "node_or_infra", True, False, "TG-IO-ERROR"),
    ("OSError: [Errno 117] Structure needs cleaning: '/data/shard-0001.tar'", "node_or_infra", True, False,
     "TG-IO-ERROR"),
    ("Lustre: scratch-MDT0000-mdc-ffff: Connection to scratch-MDT0000 (at 10.0.0.5@o2ib) was lost; in progress "
     "operations using this service will wait for recovery to complete", "node_or_infra", True, False,
     "TG-IO-ERROR"),
    # PyTorch's zip writer hides the errno: most often a full disk the same job fills again (since tune38)
    ("RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1664 vs 1558", "node_or_infra",
     False, False, "TG-CHECKPOINT-WRITE"),
    ("RuntimeError: PytorchStreamWriter failed writing file data/12: file write failed", "node_or_infra", False,
     False, "TG-CHECKPOINT-WRITE"),
    # ... and when the disk says it is full, that is the code
    ("RuntimeError: PytorchStreamWriter failed writing file data/12: file write failed\n"
     "OSError: [Errno 28] No space left on device", "node_or_infra", False, False, "TG-DISK-FULL"),
    ("wandb: Network error (ReadTimeout), entering retry loop.", "node_or_infra", True, False, "TG-NETWORK"),
    ("curl: (6) Could not resolve host: files.example.org", "node_or_infra", True, False, "TG-NETWORK"),
    ("ConnectionAbortedError: [Errno 103] Software caused connection abort", "node_or_infra", True, False,
     "TG-NETWORK"),
    # the data loader's worker got SIGTERM: what ended the job came from outside
    ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Terminated.", "node_or_infra", True, False,
     "TG-SIGTERM"),
    # divergence in Keras' and TensorFlow's words
    ("Batch 212: Invalid loss, terminating training", "user_code", False, False, "TG-LOSS-NAN"),
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: loss : Tensor had NaN values", "user_code",
     False, False, "TG-LOSS-NAN"),
    # a requirement pip cannot satisfy
    ("ERROR: Could not find a version that satisfies the requirement torch==9.9\nERROR: No matching distribution "
     "found for torch==9.9", "user_code", False, False, "TG-USER-CONFIG"),
    # hangs: py-spy's stack dump of a stuck rank, the heartbeat monitor's GIL check
    ('Process 4242: python train.py\nPython v3.10.12 (/usr/bin/python3.10)\n\nThread 4242 (idle): "MainThread"\n'
     "    wait (threading.py:320)\n    barrier (torch/distributed/distributed_c10d.py:3439)", "hang_or_stuck",
     False, False, "TG-DEADLOCK"),
    ("Could not acquire GIL within 300 ms on exit, possible GIL induced hang", "hang_or_stuck", True, False,
     "TG-STALL"),
]


# Families added from what tune3.jsonl missed (issue 13), each in its source's own words:
# (line, category, retryable, node fault, fault code).
TUNE3_FAMILIES = [
    # AMD GPUs: the amdgpu kernel driver's failed resets and firmware resume (node needs a reboot)
    ("[ 9120.5] amdgpu 0000:c3:00.0: amdgpu: ASIC reset failed with error, -110 for drm dev, 0000:c3:00.0",
     "gpu_hardware", True, True, "TG-GPU-LOST"),
    ("[ 9120.5] amdgpu 0000:c3:00.0: amdgpu: GPU reset(3) failed", "gpu_hardware", True, True, "TG-GPU-LOST"),
    ("[ 9121.0] [drm:psp_hw_start [amdgpu]] *ERROR* PSP load kdb failed!\n[ 9121.0] [drm:psp_resume [amdgpu]] "
     "*ERROR* PSP resume failed", "gpu_hardware", True, True, "TG-GPU-LOST"),
    # ... and its GPU hangs (ring timeouts) and the ROCm runtime's hardware exception
    ("[ 4410.2] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=8812, emitted "
     "seq=8814", "gpu_hardware", True, False, "TG-GPU-ERROR"),
    ("HW Exception by GPU node-2 (Agent handle: 0x5581c0e0) reason :GPU Hang", "gpu_hardware", True, False,
     "TG-GPU-ERROR"),
    # spot / preemptible capacity reported as a state of the cluster or VM
    ("I 03-02 10:00:01 controller.py:90] The spot cluster is preempted (status: STOPPED). Relaunching.",
     "node_or_infra", True, False, "TG-PREEMPTED"),
    ("WARNING: TPU VMs have been preempted; recreating the slice", "node_or_infra", True, False, "TG-PREEMPTED"),
    # kubectl get nodes as kubectl before 1.8 prints it (no ROLES column)
    ("NAME        STATUS     AGE       VERSION\ngpu-node-7  NotReady   3d        v1.7.5\n", "node_or_infra", True, True,
     "TG-NODE-EVENT"),
    # a multi-host runtime waiting at start-up for hosts the launch never started (JAX, torch_xla)
    ("UserWarning: GPU backend initialization is taking more than 120.0 seconds. Did you run your code on all "
     "hosts?", "hang_or_stuck", False, False, "TG-INIT-STALL"),
    ("Waiting to connect to client mesh master (300 seconds) localhost:51011", "hang_or_stuck", False, False,
     "TG-INIT-STALL"),
    # NCCL: ranks that disagree on a message's size (net_ib.cc), topology detection (xml.h)
    ("gpu3:901:950 [2] transport/net_ib.cc:1100 NCCL WARN NET/IB : req 1/1 tag 7 peer 10.0.0.2<40211> collective "
     "mismatch error, local size 1048576 remote size 4096", "nccl_error", False, False, "TG-NCCL-USAGE"),
    ("gpu3:901:950 [0] NCCL WARN Attribute busid of node net not found\ngpu3:901:950 [0] NCCL INFO graph/xml.cc:"
     "640 -> 3", "nccl_error", False, False, "TG-NCCL-TOPOLOGY"),
    # aborts the C/C++ runtime attributes to the program (glibc forced unwind, libstdc++)
    ("FATAL: exception not rethrown\nAborted (core dumped)", "segfault_or_signal", False, False, "TG-SIGABRT-BUG"),
    ("pure virtual method called\nterminate called without an active exception\nAborted (core dumped)",
     "segfault_or_signal", False, False, "TG-SIGABRT-BUG"),
    # start-up lines and nothing after them: a stall before the first step (convention: retryable)
    ("[default0]:Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
     "your system being overloaded", "hang_or_stuck", True, False, "TG-START-STALL"),
    ("[2024-03-01 10:00:00,000] [INFO] [launch.py:256:main] process 4242 spawned with command: ['/usr/bin/python', "
     "'-u', 'train.py', '--local_rank=0']", "hang_or_stuck", True, False, "TG-START-STALL"),
    ("Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    ("***** Running training *****\n  Num examples = 12,000\n  Num Epochs = 3\n  Total optimization steps = 1,125",
     "hang_or_stuck", True, False, "TG-START-STALL"),
    ("> initializing torch distributed ...\n> initialized tensor model parallel with size 2\n> initialized "
     "pipeline model parallel with size 4\n> setting random seeds to 1234 ...", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    # a WARNING-level record in the "LOGGER LEVEL DATE TIME message" layout (PaddlePaddle's launcher)
    ("LAUNCH WARNING 2024-05-01 10:00:00,123 log directory already exists, overwriting", "success_or_benign", True,
     False, "TG-BENIGN"),
]


# Families tune4 showed missing, each in its source's own wording (not the corpus's excerpts).
TUNE4_FAMILIES = [
    # Rust's default allocation-error handler (std::alloc::handle_alloc_error): host memory
    ("memory allocation of 1073741824 bytes failed\nAborted (core dumped)", "host_oom", False, False,
     "TG-HOST-ENOMEM"),
    ("[rank3]: memory allocation of 4096 bytes failed", "host_oom", False, False, "TG-HOST-ENOMEM"),
    # XLA / TensorFlow Status RESOURCE_EXHAUSTED in both spellings (the enum's, the older human one)
    ("Execution of replica 0 failed: Resource exhausted: Out of memory while trying to allocate 8589934592 bytes.",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
     "2147483648 bytes.", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # bash's job report for SIGABRT, padded to its column, and in other locales
    ("./run.sh: line 12: 40211 Aborted                 (core dumped) python train.py --config a.yaml",
     "segfault_or_signal", True, False, "TG-SIGABRT"),
    ("./run.sh: line 12: 40211 Aborted                 python train.py", "segfault_or_signal", True, False,
     "TG-SIGABRT"),
    ("Abgebrochen (Speicherabzug geschrieben)", "segfault_or_signal", True, False, "TG-SIGABRT"),
    ("已放弃 (核心已转储)", "segfault_or_signal", True, False, "TG-SIGABRT"),
    ("Abandon (core dumped)", "segfault_or_signal", True, False, "TG-SIGABRT"),
    # the AWS SDK for C++ (CurlHttpClient) and libcurl's error codes: object storage over the network
    ("E tensorflow/core/platform/s3/aws_logging.cc:60] Curl returned error code 28 - Timeout was reached",
     "node_or_infra", True, False, "TG-NETWORK"),
    ("W aws_logging.cc:57] Request failed, now waiting 1600 ms before attempting again.", "node_or_infra", True,
     False, "TG-NETWORK"),
    ("curl_easy_perform() failed: CURLE_OPERATION_TIMEDOUT", "node_or_infra", True, False, "TG-NETWORK"),
    # Slurm: a step whose tasks would not die after it was ended
    ("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
     "srun: error: Timed out waiting for job step to complete", "node_or_infra", True, False, "TG-SLURM-STEP-KILL"),
    ("slurmd: error: Kill task failed for StepId=4242.0", "node_or_infra", True, False, "TG-SLURM-STEP-KILL"),
    # throughput reports: a running job
    ("[INFO 2024-01-01 10:00:00] 400/2650, SamplesPerSec=13.19749106827976", "success_or_benign", True, False,
     "TG-PROGRESS"),
    ("epoch=0/micro_step=100/global_step=100, RunningAvgSamplesPerSec=52.1, CurrSamplesPerSec=51.8",
     "success_or_benign", True, False, "TG-PROGRESS"),
    (" iteration      200/  500000 | consumed samples: 102400 | elapsed time per iteration (ms): 1532.4 | "
     "learning rate: 3.000E-04", "success_or_benign", True, False, "TG-PROGRESS"),
    # slurmstepd's report that a task failed: a failure whose cause is elsewhere
    ("slurmstepd: error: *** STEP 4242.0 ON gpu-7 FAILED (non-zero exit code or other failure mode) ***",
     "unknown", True, False, "TG-FAILED"),
]


# Families tune5 showed missing, each in its source's own wording (not the corpus's excerpts).
TUNE5_FAMILIES = [
    # the container was not given the node's GPUs: NVIDIA Container Toolkit, Docker, device nodes
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
     "node_or_infra", True, True, "TG-GPU-NOT-EXPOSED"),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
     "node_or_infra", True, True, "TG-GPU-NOT-EXPOSED"),
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:318] failed call to cuInit: CUDA_ERROR_NO_DEVICE\n"
     "I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:163] no NVIDIA GPU device is present: "
     "/dev/nvidia2 does not exist", "node_or_infra", True, True, "TG-GPU-NOT-EXPOSED"),
    # the fabric could not register a buffer with the NIC: a transport error, not host memory
    ("gpu-3:4411:4502 [2] NCCL WARN NET/OFI Unable to register memory (type = 2) for device 3. RC: -12, "
     "Error: Cannot allocate memory", "nccl_error", True, False, "TG-COMM-ERROR"),
    ("gpu-3:4411:4502 [2] NCCL WARN NET/IB : ibv_reg_mr failed: Cannot allocate memory", "nccl_error", True, False,
     "TG-COMM-ERROR"),
    ("libfabric:1234:1700000000::efa:mr:efa_mr_reg_impl():512<warn> Unable to register MR: Cannot allocate memory",
     "nccl_error", True, False, "TG-COMM-ERROR"),
    # ranks timed out in different collectives at one sequence number, or the desync checker says so
    ("[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL("
     "SeqNum=512, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 milliseconds before "
     "timing out.\n[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=512, OpType=_ALLGATHER_BASE, NumelIn=64, NumelOut=512, Timeout(ms)=600000) ran for 600020 "
     "milliseconds before timing out.", "nccl_timeout", False, False, "TG-NCCL-DESYNC"),
    ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE), but Rank 1 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST). Collectives differ in the following aspects: "
     "Op type: ALLREDUCEvs BROADCAST", "user_code", False, False, "TG-COLLECTIVE-MISMATCH"),
    # JAX's coordination service: the start-up connect barrier, not a training-step collective
    ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
     "PjRT_Client_Connect. Timed out task names:\n/job:jax_worker/replica:0/task:1\n",
     "node_or_infra", True, False, "TG-RENDEZVOUS"),
    # Kubernetes' controller utilities: a running pod with a deletion timestamp was deleted from outside
    ("I0301 10:00:01.000000       1 controller_utils.go:812] Ignoring inactive pod default/demo-worker-3 in "
     "state Running, deletion time 2024-03-01 10:00:00 +0000 UTC", "node_or_infra", True, False,
     "TG-K8S-DISRUPTION"),
    # TensorFlow's Estimator: the step-0 checkpoint is a start-up line; nothing after it is a stall
    ("INFO:tensorflow:Create CheckpointSaverHook.\nINFO:tensorflow:Graph was finalized.\n"
     "INFO:tensorflow:Running local_init_op.\nINFO:tensorflow:Done running local_init_op.\n"
     "INFO:tensorflow:Saving checkpoints for 0 into /tmp/run/model.ckpt.", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    # a bare "Done." is a finish
    ("evaluating...\nDone.\n", "success_or_benign", True, False, "TG-BENIGN"),
]


# Families tune6 showed missing, each in its source's own wording (not the corpus's excerpts).
TUNE6_FAMILIES = [
    # Open MPI's runtime lost a daemon on another node
    ("ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[1234,0],0] on node head\n"
     "  Remote daemon: [[1234,0],3] on node worker-3", "node_or_infra", True, True, "TG-NODE-LOST"),
    ("PRTE has lost communication with a remote daemon.", "node_or_infra", True, True, "TG-NODE-LOST"),
    ("An ORTE daemon has unexpectedly failed after launch and before communicating back to mpirun.",
     "node_or_infra", True, True, "TG-NODE-LOST"),
    # a scheduler's agent dropped out under the task
    ("Trial 12 was terminated: allocation failed due to agent failure: agent closed with allocated containers",
     "node_or_infra", True, True, "TG-NODE-LOST"),
    # slurmstepd gave up on a step its signals could not end (the node is drained)
    ("[2024-01-01T10:00:00.000] [100.0] error: *** STEP 100.0 STEPD TERMINATED ON gpu07 AT 2024-01-01T10:01:00 "
     "DUE TO JOB NOT ENDING WITH SIGNALS ***", "node_or_infra", True, True, "TG-SLURM-STEP-KILL"),
    # the registry timed out under the kubelet's pull
    ('Failed to pull image "registry.example.com/train:1.0": rpc error: code = Unknown desc = Error response from '
     "daemon: Get https://registry.example.com/v2/: net/http: TLS handshake timeout", "node_or_infra", True, False,
     "TG-K8S-IMAGE-PULL-TRANSIENT"),
    # HCCL's collective timeouts (Ascend)
    ("EI0006: Getting socket times out. Reason: Remote Rank did not send the data in time.", "nccl_timeout", True,
     False, "TG-NCCL-TIMEOUT"),
    ("EI0002: The wait execution of the Notify register times out.", "nccl_timeout", True, False,
     "TG-NCCL-TIMEOUT"),
    # memory over a limit the job itself set
    ("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62", "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("slurmstepd: error: Job 42 exceeded memory limit (9000000 > 8192000), being killed", "host_oom", False, False,
     "TG-HOST-OOM-LIMIT"),
    ("Worker exits with an exit code None. The worker may have exceeded K8s pod memory limits.", "host_oom", False,
     False, "TG-K8S-OOMKILLED"),
    # start-up lines with nothing after them
    ("Loading checkpoint shards:  60%|######    | 3/5 [00:10<00:07,  3.5s/it]", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    ("Loading checkpoint shards: 100%|##########| 4/4 [00:08<00:00,  2.1s/it]\n"
     "No pre-built kernel is found, build and load the fused_optim kernel during runtime now",
     "hang_or_stuck", True, False, "TG-START-STALL"),
    # fairseq's epoch stats (values quoted)
    ('2024-01-01 10:00:00 | INFO | train | {"epoch": 3, "train_loss": "4.512", "train_wps": "1200.5"}\n'
     "2024-01-01 10:00:00 | INFO | fairseq_cli.train | end of epoch 3 (average epoch stats below)",
     "success_or_benign", True, False, "TG-PROGRESS"),
]


# Families the tune7 excerpts showed, in the wording the software prints (not the excerpts').
TUNE7_FAMILIES = [
    # Ray's OutOfMemoryError advice, kept by a truncated job log without its first sentence
    ("(ActorModelRayActor pid=100) Refer to the documentation on how to address the out of memory issue: "
     "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.", "host_oom", False, False,
     "TG-HOST-OOM"),
    ("To adjust the kill threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray.",
     "host_oom", False, False, "TG-HOST-OOM"),
    # PyTorch's DataLoader worker killed by SIGBUS, the signal name wrapped, and its /dev/shm hint
    ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: \nBus error. ", "segfault_or_signal", False,
     False, "TG-WORKER-CRASH"),
    ("ERROR: It is possible that dataloader's workers are out of shared memory. Please try to raise your shared "
     "memory limit.", "segfault_or_signal", False, False, "TG-WORKER-CRASH"),
    # gRPC UNAVAILABLE while TensorFlow's master sets up the cluster session
    ("E tensorflow/core/distributed_runtime/master.cc:267] Master init: Unavailable: Socket closed",
     "node_or_infra", True, False, "TG-NETWORK"),
    # ... but the master only waiting for a worker says no more than a stall (since tune27)
    ("I tensorflow/core/distributed_runtime/master.cc:221] CreateSession still waiting for response from worker: "
     "/job:worker/replica:0/task:3", "hang_or_stuck", True, False, "TG-START-STALL"),
    ("E tensorflow/core/distributed_runtime/master.cc:267] Master init: Unavailable: Socket closed\n"
     "I tensorflow/core/distributed_runtime/master.cc:221] CreateSession still waiting for response from worker: "
     "/job:worker/replica:0/task:3", "node_or_infra", True, False, "TG-NETWORK"),
    ('UnknownError: {"created":"@1.0","description":"Error received from peer","file_line":1,"grpc_status":14,'
     '"grpc_message":"Connection reset by peer"}', "node_or_infra", True, False, "TG-NETWORK"),
    # a failed glog/absl CHECK in C++ framework code
    ("F0101 10:00:00.000000  1234 graph_builder.cpp:88] Check failed: shape.NumAxes() == 2 (3 vs. 2) ",
     "user_code", False, False, "TG-USER-EXCEPTION"),
    ("*** Check failure stack trace: ***\n    @     0x7f00deadbeef  google::LogMessage::Fail()", "user_code", False,
     False, "TG-USER-EXCEPTION"),
    # MXNet's Speedometer and fit loop
    ("INFO:root:Epoch[3] Batch [100]\tSpeed: 812.55 samples/sec\taccuracy=0.512", "success_or_benign", True, False,
     "TG-PROGRESS"),
    ("INFO:root:Epoch[3] Time cost=41.203\nINFO:root:Epoch[3] Validation-top_k_accuracy_5=0.91",
     "success_or_benign", True, False, "TG-PROGRESS"),
    # deepspeed.initialize's version line, then nothing
    ("[2024-01-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.12.6, "
     "git-hash=abc123, git-branch=master", "hang_or_stuck", True, False, "TG-START-STALL"),
    # the log ends on a tqdm bar stuck at 0%, with the bar's description before it: a start-up stall the
    # text does not explain, retried within the budget (TG-INIT-STALL, not retried, until tune38)
    ("Training Progress:   0%|          | 0/125 [12:03<?, ?it/s]", "hang_or_stuck", True, False, "TG-START-STALL"),
    ("Epoch 0:   0%|          | 0/500 [00:40<?, ?it/s]\n", "hang_or_stuck", True, False, "TG-START-STALL"),
]


TUNE8_FAMILIES = [
    # TensorFlow's BFC allocator retrying with less memory says itself that it is not a failure
    ("  15/100 [===>.....] - ETA: 3:55 - loss: 0.0170\n2018-11-25 19:04:59.501703: W tensorflow/core/common_runtime/"
     "bfc_allocator.cc:215] Allocator (GPU_0_bfc) ran out of memory trying to allocate 217.69MiB. The caller "
     "indicates that this is not a failure, but may mean that there could be performance gains if more memory "
     "were available.", "success_or_benign", True, False, "TG-BENIGN"),
    # ... while the allocator's real exhaustion stays device OOM
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:424] Allocator (GPU_0_bfc) ran out of memory trying to "
     "allocate 1.00GiB (rounded to 1073741824).  Current allocation summary follows.", "cuda_oom", False, False,
     "TG-CUDA-OOM"),
    # DeepSpeed's op builder loading a JIT-built extension on each rank, then nothing
    ("Loading extension module utils...\nTime to load utils op: 11.24 seconds\nLoading extension module utils...\n"
     "Time to load utils op: 11.12 seconds\n", "hang_or_stuck", True, False, "TG-START-STALL"),
    # a traceback that ends in a blocking wait, with no exception line: a stuck DataLoader dumped
    ('  File "/usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1310, in _try_get_data\n'
     "    data = self._data_queue.get(timeout=timeout)\n           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n",
     "hang_or_stuck", True, False, "TG-STALL"),
    ('  File "/usr/lib/python3.11/threading.py", line 1132, in _wait_for_tstate_lock\n'
     "    if lock.acquire(block, timeout):\n  File \"/usr/lib/python3.11/threading.py\", line 1112, in join\n"
     "    self._wait_for_tstate_lock()\n", "hang_or_stuck", True, False, "TG-STALL"),
]


TUNE9_TO_15_FAMILIES = [
    # NCCL's topology search that cannot resolve a sysfs PCI path, and the error unwinding from it
    ("c1:57:75 [0] misc/topo.cc:22 NCCL WARN Could not find real path of /sys/class/pci_bus/0000:02/../../0000:02:00.0\n"
     "c1:57:75 [0] NCCL INFO init.cc:876 -> 2\nc1:57:75 [0] NCCL INFO init.cc:909 -> 2", "nccl_error", False, False,
     "TG-NCCL-TOPOLOGY"),
    # ... while the warning alone, with NCCL going on, is no fault of NCCL's
    ("c1:57:75 [0] misc/topo.cc:22 NCCL WARN Could not find real path of /sys/class/pci_bus/0000:02/../../0000:02:00.0\n"
     "c1:57:75 [0] NCCL INFO Channel 00/02 :    0   1\nc1:57:75 [0] NCCL INFO comm 0x55 rank 0 nranks 2 - Init COMPLETE",
     "hang_or_stuck", True, False, "TG-NCCL-INIT-STALL"),
    # NCCL's CUDA payload naming a sticky device error
    ("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, unhandled cuda error (run with "
     "NCCL_DEBUG=INFO for details), NCCL version 2.28.9\nncclUnhandledCudaError: Call to CUDA function failed.\n"
     "Last error:\nCuda failure 999 'unknown error'", "gpu_hardware", True, False, "TG-GPU-ERROR"),
    # lspci: an NVIDIA function whose config space reads all ones
    ("1a:00.0 VGA compatible controller: NVIDIA Corporation TU102GL [Quadro RTX 6000/8000] (rev a1)\n"
     "1c:00.0 VGA compatible controller: NVIDIA Corporation TU102GL [Quadro RTX 6000/8000] (rev ff)",
     "gpu_hardware", True, True, "TG-GPU-LOST"),
    # glibc's heap-corruption abort in its older format: the process corrupted its heap
    ("*** Error in `python3': munmap_chunk(): invalid pointer: 0x0000555560e2b570 ***\n======= Backtrace: =========",
     "segfault_or_signal", False, False, "TG-SIGABRT-BUG"),
    # NCCL's proxy thread losing its peer's socket
    ("Socket recv failed while polling for opId=0x7f0c84227ac0", "nccl_error", True, False, "TG-NCCL-ERROR"),
    # PaddlePaddle's DataLoader names a worker the kernel killed
    ("SystemError: (Fatal) DataLoader process (pid 1104) exited is killed by signal: Killed. (at "
     "/paddle/paddle/fluid/imperative/data_loader.cc:181)", "host_oom", False, False, "TG-HOST-ENOMEM"),
    # Megatron-LM's last set-up lines before its first iteration, then nothing
    ("[after dataloaders are built] datetime: 2021-06-10 03:49:39\ndone with setups ...\ntraining ...\n"
     "[before the start of training step] datetime: 2021-06-10 03:49:39", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    # gloo's transport giving up on a read: a collective that timed out (JAX on CPU, torch gloo)
    ("process 0: psum_scatter FAILED after 30.0 s: UNKNOWN: Gloo ReduceScatter failed: [external/gloo/gloo/"
     "transport/tcp/buffer.cc:72] Read timeout [::1]:38624", "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    # a file system without POSIX locks under a writer that locks
    ('ValueError: Error opening "zarr" driver: Error writing local file "/gpfs/ckpt/.zarray": Failed to acquire '
     "lock on file: /gpfs/ckpt/.zarray.__lock [OS error: Invalid argument]", "node_or_infra", False, False,
     "TG-FS-NO-LOCKS"),
    ("OSError: [Errno 37] No locks available", "node_or_infra", False, False, "TG-FS-NO-LOCKS"),
    # a trainer that stops itself because a component's heartbeats stopped
    ("[2023-09-18 21:35:46,519][196071] Stopping training due to lack of heartbeats from <class 'Batcher'>",
     "hang_or_stuck", True, False, "TG-STALL"),
    # PhysX's GPU allocator out of device memory
    ("[job] PxgCudaDeviceMemoryAllocator fail to allocate memory 100663296 bytes!! Result = 2", "cuda_oom", False,
     False, "TG-CUDA-OOM"),
    # ranks disagreeing on what collective N is: the program took different paths on different ranks
    ("[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, "
     "OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800087 milliseconds before timing out.\n"
     "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, "
     "OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=1800000) ran for 1800090 milliseconds before timing out.",
     "nccl_timeout", False, False, "TG-NCCL-DESYNC"),
    # ... while every rank stuck in the same collective is a plain timeout, retried
    ("[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, "
     "OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=1800000) ran for 1800087 milliseconds before timing out.\n"
     "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, "
     "OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=1800000) ran for 1800090 milliseconds before timing out.",
     "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    # nvidia-smi -q: uncorrectable errors' row remaps waiting for a GPU reset
    ("Remapped Rows\n        Correctable Error                 : 0\n        Uncorrectable Error               : 4\n"
     "        Pending                           : Yes", "gpu_hardware", True, True, "TG-GPU-ECC"),
    # ... while no pending remap is a healthy section
    ("Remapped Rows\n        Correctable Error                 : 0\n        Uncorrectable Error               : 0\n"
     "        Pending                           : No", "unknown", True, False, "TG-UNKNOWN"),
    # legacy PyTorch (THC) device OOM
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    # zsh's job table reporting a job SIGKILLed
    ("Epoch 00:   0%|          | 0/1207179 [00:00<?, ?it/s]\n[1]    55263 killed     sudo python train.py",
     "host_oom", False, False, "TG-SIGKILL"),
    # CPython's fatal errors other than a segfault abort the interpreter: it found its state corrupted
    ("Train:   4%|###       | 166/4634 [4:38:39<124:59:57, 100.72s/it]\nFatal Python error: none_dealloc: deallocating "
     "None\nPython runtime state: initialized", "segfault_or_signal", False, False, "TG-SIGABRT-BUG"),
    # torchtune writing its checkpoint shards
    ("Model checkpoint of size 4.34 GiB saved to /mnt/out/epoch_0/ft-model-00007-of-00030.safetensors",
     "success_or_benign", True, False, "TG-BENIGN"),
    # a CUDA check that failed with error 2 (cudaErrorMemoryAllocation): Caffe's glog check, Caffe2's enforce
    ("F0126 16:08:02.152665 10326 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n"
     "*** Check failure stack trace: ***", "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("[E net_async_base.cc:382] [enforce fail at context_gpu.cu:524] error == cudaSuccess. 2 vs 0. Error at: "
     "caffe2/core/context_gpu.cu:524: out of memory", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # Ray's autoscaler that cannot place what the job asks for: the job waits for ever
    ("(autoscaler +3m5s) Warning: The following resource request cannot be scheduled right now: {'CPU': 2.0, "
     "'GPU': 2.0}. This is likely due to all cluster resources being claimed by actors.", "hang_or_stuck", False,
     False, "TG-INIT-STALL"),
    # mmengine's validation lines are progress
    ("2022-04-12 01:27:55,144 - mmdet - INFO - Epoch(val) [1][7330]   bbox_mAP: 0.2500, bbox_mAP_50: 0.4100",
     "success_or_benign", True, False, "TG-PROGRESS"),
    # PBS/Torque deleting a job on someone's request
    ("04/18/2016 22:55:25;0008;PBS_Server.12149;Job;7082041.hal-sched1.local;Job deleted at request of "
     "root@hal-sched1", "node_or_infra", False, False, "TG-CANCELLED"),
    # a bar at 0% with a warning printed onto its line, then nothing
    ("Epoch 0:   0%|          | 0/410 [00:00<?, ?it/s]/usr/lib/python3/site-packages/torch/utils/checkpoint.py:460: "
     "UserWarning: torch.utils.checkpoint: please pass in use_reentrant=True or use_reentrant=False explicitly.\n"
     "  warnings.warn(\n", "hang_or_stuck", True, False, "TG-START-STALL"),
    # tune16: a bar drawn without a space before its rate (tensorpack's format), left at 0%, after
    # the start line (step 0 is a start, not progress)
    ("Start training with global_step=0\n0%|          |0/10000[00:00<?,?it/s]\n", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    ("[Epoch 3] global_step=4200 lr=0.0003\n", "success_or_benign", True, False, "TG-PROGRESS"),
    # tune17: an Ascend NPU that dropped out; checkpoints written
    ("Device[1] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc][LINE:407]", "gpu_hardware", True, True,
     "TG-GPU-LOST"),
    ("[INFO] [torch_checkpoint_engine.py:23:save] [Torch] Saved ./ckpt/global_step300/mp_rank_00_model_states.pt.",
     "success_or_benign", True, False, "TG-PROGRESS"),
    ("INFO:torchsnapshot.scheduler:---- Rank 5 completed writing in 81.26 seconds (throughput 246.13MB/s) ----",
     "success_or_benign", True, False, "TG-PROGRESS"),
    # tune18, other accelerators' runtimes and collective libraries in their documented words
    ("EE1002: 2024-09-26-16:06:40.565.510 Stream synchronize timeout. rtDeviceSynchronize execute failed, "
     "reason=[stream sync timeout]", "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    ("|CCL_ERROR| worker.cpp:338 ccl_worker_func: worker 0 caught internal exception: oneCCL: ze_call.cpp:28 "
     "do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists, code: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("2024:01:15-03:36:29:(1980058) |CCL_ERROR| atl_ofi.cpp:120 init: fi_getinfo error: ret -61, providers 0",
     "nccl_error", True, False, "TG-NCCL-ERROR"),
    ("HCCL demo error: In function hcclAllReduceWrapper(): hcclAllReduce(sendbuff, recvbuff, count) failed: A device "
     "is busy or an internal check failed\nterminate called without an active exception", "nccl_error", True, False,
     "TG-NCCL-ERROR"),
    # a notebook's bar left at 0%; NeMo's warning lines, OpenNMT's perplexity reports and AlphaFold's
    # closing timings are health
    ("Epoch ... :   0% 0/3 [00:00<?, ?it/s]\nTraining...:   0% 0/161270 [00:00<?, ?it/s]\n", "hang_or_stuck", True,
     False, "TG-START-STALL"),
    ("[NeMo W 2024-03-31 19:25:05 tacotron2:338 rank:2] Reached max decoder steps 1000.", "success_or_benign", True,
     False, "TG-BENIGN"),
    ("[2018-07-24 13:16:21,693 INFO] Step 50/  100; acc:   5.05; ppl: 2389.35; xent: 7.78; lr: 0.00001",
     "success_or_benign", True, False, "TG-PROGRESS"),
    ("I0409 21:15:23.404444 139865793787712 run_alphafold.py:271] Final timings for model_1: {'features': 17525.1}",
     "success_or_benign", True, False, "TG-BENIGN"),
    # tune19: Windows' NTSTATUS crash codes as a launcher reports them; the old runtime's launch
    # timeout; a program telling the user to check the arguments
    ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code 3221225477",
     "segfault_or_signal", True, False, "TG-SIGSEGV"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit code 3221225620",
     "segfault_or_signal", False, False, "TG-FATAL-SIGNAL"),
    ("RuntimeError: cuda runtime error (6) : the launch timed out and was terminated at /opt/conda/THC/THCGeneral.cpp:8",
     "gpu_hardware", True, False, "TG-GPU-ERROR"),
    ("No data found. Please verify arguments (train_data_dir must be the parent of folders with images)", "user_code",
     False, False, "TG-USER-CONFIG"),
    # tune20: NCCL's shared memory, TensorFlow's collective ops, Horovod's HTTP rendezvous; iteration 0
    ("2edaa9ce4458:21611:21719 [2] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment "
     "/dev/shm/nccl-Ex9eRl (size 9637888)", "nccl_error", False, False, "TG-NCCL-SHM"),
    ("E tensorflow/core/common_runtime/ring_reducer.cc:369] Aborting RingReduce with Unavailable: Socket closed",
     "nccl_error", True, False, "TG-COMM-ERROR"),
    ("[1]<stderr>:E horovod/common/gloo/http_store.cc:96] HTTP GET request failed too many times, aborting.\n"
     "[1]<stderr>:terminate called after throwing an instance of 'std::runtime_error'", "node_or_infra", True, False,
     "TG-RENDEZVOUS"),
    ("I0705 13:35:50.376612 18557 solver.cpp:237] Iteration 0, loss = 2.9456\n"
     "Epoch 0:   0%|          | 0/32425 [00:00<?, ?it/s]/opt/nvme_optimizer.py:55: UserWarning: TypedStorage is "
     "deprecated.\n  numel += p.storage().size()\n", "hang_or_stuck", True, False, "TG-START-STALL"),
    ("I0705 13:36:50.376612 18557 solver.cpp:237] Iteration 20, loss = 2.1456", "success_or_benign", True, False,
     "TG-PROGRESS"),
    # tune21: THC's wording of CUBLAS_STATUS_EXECUTION_FAILED; early-stopping bookkeeping
    ("RuntimeError: cublas runtime error : the GPU program failed to execute at /opt/pytorch/aten/src/THC/THCBlas.cu:259",
     "gpu_hardware", True, False, "TG-GPU-ERROR"),
    ("INFO [trainer.py:163]: Early stopping counter: 1 out of 10\nINFO [trainer.py:506]: Validation finished.",
     "success_or_benign", True, False, "TG-PROGRESS"),
    # the heartbeat monitor after a caught collective timeout is its cascade
    ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
     "OpType=BROADCAST, NumelIn=5, NumelOut=5, Timeout(ms)=1800000) ran for 1800047 milliseconds before timing out.\n"
     "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated "
     "after dumping debug info. workMetaList_.size()=2", "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    # a job over its own memory request outgrows it again
    ("srun: error: gpu-17: task 3: Out Of Memory\nsrun: Terminating StepId=4777403.0", "host_oom", False, False,
     "TG-HOST-OOM-CGROUP"),
]

# What tune29's misses taught (docs/fault-codes.md, "Changed from tune29").
TUNE29_FAMILIES = [
    # Ctrl-C after the terminal echoed another key: the run was stopped by hand
    ("2022-12-02 00:53:12,679 INFO: [train..][epoch:  0, iter:   3,700] l_pix: 1.8931e-02\n"
     "^[[6~^CTraceback (most recent call last):\n  File \"train.py\", line 221, in <module>\n"
     "    train_data = prefetcher.next()", "hang_or_stuck", True, False, "TG-INTERRUPTED-STALL"),
    # BasicSR's last line before its first iteration, and nothing after it
    ("2022-01-28 12:00:05,722 INFO: Model [RealESRNetModel] is created.\n"
     "2022-01-28 12:00:05,814 INFO: Start training from epoch: 0, iter: 0", "hang_or_stuck", True, False,
     "TG-START-STALL"),
    # DeepSpeed's runner in its own words when the passwordless-ssh check fails
    ("RuntimeError: Using hostfile at /etc/hostfile but host=worker-0.job was not reachable via ssh. If you are "
     "running with a single node please remove /etc/hostfile or setup passwordless ssh.", "node_or_infra", False,
     False, "TG-SSH-SETUP"),
    # the node's Fabric Manager is not running: the node's service, not its GPUs
    ("test: Test CUDA failure common.cu:941 'system not yet initialized'", "node_or_infra", True, True,
     "TG-FABRIC-MANAGER"),
    ("cudaErrorSystemNotReady", "node_or_infra", True, True, "TG-FABRIC-MANAGER"),
    # a worker's bus error is named before the tensor-sharing failure that comes with it ...
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
     "Traceback (most recent call last):\n    fd, size = storage._share_fd_()\n"
     "RuntimeError: unable to write to file </torch_2286_2857144775>", "segfault_or_signal", False, False,
     "TG-WORKER-CRASH"),
    # ... which alone is still the full /dev/shm
    ("RuntimeError: unable to write to file </torch_2286_2857144775>", "node_or_infra", False, False, "TG-SHM-FULL"),
    # the runtime's own words for cudaErrorNvlinkUncorrectable (220)
    ("RuntimeError: CUDA error: an NVLink uncorrectable error was detected during the execution", "gpu_hardware",
     True, True, "TG-GPU-FABRIC"),
    # a c10d store request that waited past its timeout
    ("Traceback (most recent call last):\n    store.get(key)\nRuntimeError: Socket Timeout", "node_or_infra", True,
     False, "TG-RENDEZVOUS"),
    ("torch.distributed.DistNetworkError: Socket Timeout", "node_or_infra", True, False, "TG-RENDEZVOUS"),
]

# What tune30's misses taught (docs/fault-codes.md, "Changed from tune30").
TUNE30_FAMILIES = [
    # the kernel's report of a process it sent SIGSEGV
    ("Mar 24 09:53:55 cn110 kernel: python[3551]: segfault at 1378 ip 00007fff859dbeff sp 00007fff3b60ce60 error 4 in "
     "libcuda.so.418.67[7fff858c5000+dec000]", "segfault_or_signal", False, False, "TG-SIGSEGV-LIB"),
    # PCIe error recovery giving up on the GPU itself
    ("[  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)\n"
     "[  +0.000004] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
     "gpu_hardware", True, True, "TG-GPU-LOST"),
    # ... while the root port's lines alone are the host's
    ("[  +0.000004] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
     "node_or_infra", True, True, "TG-HOST-HARDWARE"),
    # py-spy dump's frames of a live process
    ("    log (pytorch_lightning/core/module.py:447)\n    training_step (nemo/models/gpt_model.py:653)\n"
     "    forward (pytorch_lightning/overrides/base.py:90)\n    _call_impl (torch/nn/modules/module.py:1514)\n",
     "hang_or_stuck", False, False, "TG-DEADLOCK"),
    # filelock trying the same lock again and again
    ("".join(f"2024-02-27 15:56:22,42{i} - filelock/_api.py[line:254] - DEBUG: Attempting to acquire lock 1401920099{i} on "
             "/home/u/.triton/autotune/Fp16Matmul_2d_kernel.pickle.lock\n" for i in range(3)),
     "hang_or_stuck", False, False, "TG-DEADLOCK"),
]

# What tune31's misses taught (docs/fault-codes.md, "Changed from tune31").
TUNE31_FAMILIES = [
    # CuPy's memory pool (and Chainer on it), before and after CuPy 5
    ("Exception in main training loop: out of memory to allocate 205520896 bytes (total 16068929536 bytes)",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: "
     "14,495,514,624 bytes).", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # NCCL before 2.3 did not name itself in its INFO lines
    ("Epoch 1/6\nvm1358:13648:13668 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]\n"
     "vm1358:13648:13668 [0] INFO Using internal Network Socket\n"
     "vm1358:13648:13668 [0] INFO NET : Using interface eth0:10.1.0.5<0>\n", "hang_or_stuck", True, False,
     "TG-NCCL-INIT-STALL"),
    # Ray cannot place what the job asks for: the scheduler's words, Tune's warning, Tune's status
    ("(scheduler +2m) Warning: The actor or task with ID ffff cannot be scheduled right now. It requires "
     "{GPU: 8.000000} for placement, however the cluster currently cannot provide the requested resources.",
     "hang_or_stuck", False, False, "TG-INIT-STALL"),
    ("WARNING insufficient_resources_manager.py:128 -- Ignore this message if the cluster is autoscaling. No trial "
     "is running and no new trial has been started within the last 60 seconds.", "hang_or_stuck", False, False,
     "TG-INIT-STALL"),
    ("== Status ==\nCurrent time: 2022-11-02 10:05:51 (running for 00:08:20.53)\nNumber of trials: 2/2 (2 PENDING)\n",
     "hang_or_stuck", False, False, "TG-INIT-STALL"),
    # tf_cnn_benchmarks' step lines are progress
    ("Done warm up\nStep\tImg/sec\ttotal_loss\n1\timages/sec: 3.7 +/- 0.0 (jitter = 0.0)\t9.155\n"
     "10\timages/sec: 4.9 +/- 2.7 (jitter = 2.2)\t9.047\n", "success_or_benign", True, False, "TG-PROGRESS"),
    # a launcher's report of SIGBUS is not retried: mostly a container's small /dev/shm
    ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 139 closing signal SIGTERM\n"
     "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 138) of binary: "
     "/usr/bin/python3", "segfault_or_signal", False, False, "TG-SIGBUS"),
]

# What tune32's misses taught (docs/fault-codes.md, "Changed from tune32").
TUNE32_FAMILIES = [
    # NCCL's own verbs call failing with ENOMEM: the NIC's limits, not host memory
    ("h200-2:4016:4653 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory",
     "nccl_error", True, False, "TG-COMM-ERROR"),
    # Ascend's runtime and HAMi's vGPU quota out of device memory
    ("EL0004: 2024-08-28-16:15:00.358.141 Failed to allocate memory.\n        Possible Cause: Available memory is "
     "insufficient.", "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("rtGetDevMsg execute failed, reason=[driver error:out of memory][FUNC:FuncErrorReason]", "cuda_oom", False, False,
     "TG-CUDA-OOM"),
    ("[HAMI-core ERROR (pid:30 thread=140382094939712 allocator.c:53)]: Device 0 OOM 3171158016 / 3145728000\n"
     "RuntimeError: CUDA error: unrecognized error code", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # NNI cannot place a trial
    ("[9/29/2019, 4:40:41 PM] WARNING [ 'Scheduler: trialJob id iwzEY, no machine can be scheduled, return "
     "TMP_NO_AVAILABLE_GPU ' ]", "hang_or_stuck", False, False, "TG-INIT-STALL"),
    # a throughput report is progress
    ("[1,3]<stdout>:Process 3 - Training time: 10.07 seconds\n[1,3]<stdout>:Process 3 - Throughput: 9.93 samples/second",
     "success_or_benign", True, False, "TG-PROGRESS"),
    # DeepSpeed's launcher tearing its ranks down is a failure, not the silence after start-up
    ("Loading extension module utils...\nTime to load utils op: 16.88 seconds\n"
     "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80", "unknown", True, False,
     "TG-FAILED"),
    # the TPU held by another process
    ("RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by a process with pid 4121.",
     "node_or_infra", True, False, "TG-DEVICE-IN-USE"),
    ("Check failed: ... (PERMISSION_DENIED: open(/dev/accel0): Operation not permitted: Operation not permitted; "
     "Couldn't open device: /dev/accel0", "node_or_infra", True, False, "TG-DEVICE-IN-USE"),
    # aws-ofi-nccl with no usable libfabric provider, under an ssh notice that is harmless
    ("10.3.35.83: Warning: Permanently added '[10.3.60.130]:2022' (RSA) to the list of known hosts.\n"
     "10.3.35.83: WARN: Function: find_ofi_provider Line: 543: NET/OFI Couldn't find any optimal provider\n"
     "10.3.35.83: WARN: Function: main Line: 66: NET/OFI OFI NCCL failure: 2", "nccl_error", False, False,
     "TG-NCCL-NET-PLUGIN"),
    # the device plugin finds no NVIDIA platform on a GPU node
    ("I0201 22:44:21.277776  1 factory.go:107] Detected non-NVML platform: could not load NVML library: "
     "libnvidia-ml.so.1: cannot open shared object file\nE0201 22:44:21.277824  1 factory.go:115] Incompatible "
     "platform detected", "node_or_infra", True, True, "TG-GPU-NOT-EXPOSED"),
    # zsh's job report of a signal, in its words
    ("LLVM ERROR: Failed to infer result type(s).\nzsh: abort      python train.py", "segfault_or_signal", True, False,
     "TG-SIGABRT"),
    ("zsh: killed     python train.py --batch-size 64", "host_oom", False, False, "TG-SIGKILL"),
    ("zsh: terminated  torchrun --nproc-per-node 8 train.py", "node_or_infra", True, False, "TG-SIGTERM"),
    # ... and its crash reports stay the shell's, as bash's do
    ("zsh: segmentation fault (core dumped)  python train.py", "segfault_or_signal", False, False, "TG-SIGSEGV-LIB"),
    # messages written from their sources: c10d's monitored barrier, as the ranks that came see it
    ("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv "
     "from rank 0. Please check rank 0 logs for faulty rank.", "hang_or_stuck", True, False, "TG-STALL"),
    # the kernel's OOM killer with nothing left to kill
    ("[ 8812.331] Out of memory and no killable processes...", "host_oom", False, False, "TG-HOST-OOM"),
    # a NIC that went down under the job
    ("mlx5_core 0000:5e:00.0 ib0: Link is Down", "node_or_infra", True, True, "TG-HOST-HARDWARE"),
    ("kernel: NETDEV WATCHDOG: ens5 (ena): transmit queue 3 timed out", "node_or_infra", True, True,
     "TG-HOST-HARDWARE"),
    # a hub's 5xx as requests words it
    ("huggingface_hub.errors.HfHubHTTPError: 504 Server Error: Gateway Time-out for url: "
     "https://huggingface.co/api/datasets/x", "node_or_infra", True, False, "TG-NETWORK"),
    # DeepSpeed's launcher saying a rank finished
    ("[2024-01-01 00:00:00,000] [INFO] [launch.py:347:main] Process 1234 exits successfully.", "success_or_benign",
     True, False, "TG-BENIGN"),
]

# What tune33's misses taught (docs/fault-codes.md, "Changed from tune33").
TUNE33_FAMILIES = [
    # the driver dumping the GPU's crashed GSP or falcon micro-controller
    ("10.0.0.7: kern: warning: [2026-04-22T21:27:51.29Z]: NVRM: kflcnCoreDumpNondestructive_IMPL: TRACE: 03 = "
     "0x0000000005c366c0", "gpu_hardware", True, True, "TG-GPU-XID"),
    # XLA's coordination service losing a task, as the others and the coordinator say it
    ("E0101 client.cc:121] Terminating process because the coordinator detected missing heartbeats. This most "
     "likely indicates that another task died", "node_or_infra", True, False, "TG-PEER-LOST"),
    ("jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy (stopped sending "
     "heartbeats): /job:jax_worker/replica:0/task:5", "node_or_infra", True, False, "TG-PEER-LOST"),
    # Open MPI's TCP transport meeting a peer it did not expect
    ("[gpu-03][[12345,1],7][btl_tcp_endpoint.c:625:mca_btl_tcp_endpoint_recv_connect_ack] received unexpected "
     "process identifier [[12345,1],3]", "nccl_error", True, False, "TG-COMM-ERROR"),
    # DeepSpeed's fused optimizer skipping a step on overflow is the loss scaler at work
    ("[2024-01-01 00:00:00,000] [INFO] [fused_optimizer.py:344:_update_scale] Grad overflow on iteration 10",
     "success_or_benign", True, False, "TG-BENIGN"),
    # torch elastic's rendezvous done, and nothing after it: a start that stalled
    ("torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:\n"
     "  restart_count=0\n  master_addr=node1\n", "hang_or_stuck", True, False, "TG-START-STALL"),
    # Lua Torch's disk writer giving up part-way through a checkpoint
    ("luajit: torch/File.lua:210: write error: wrote 9367499 blocks instead of 31014000 at TH/THDiskFile.c:356",
     "node_or_infra", False, False, "TG-CHECKPOINT-WRITE"),
]


TUNE34_FAMILIES = [
    # an MPI call the standard's error classes call wrong, in mpi4py's, MPICH's and Open MPI's words
    ("mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated", "user_code", False, False, "TG-MPI-USAGE"),
    ("Fatal error in PMPI_Recv: Message truncated, error stack:\nPMPI_Recv(200): MPI_Recv(buf=0x7f, count=4, "
     "MPI_INT, src=0, tag=1, MPI_COMM_WORLD) failed", "user_code", False, False, "TG-MPI-USAGE"),
    ("*** The MPI_Comm_rank() function was called before MPI_INIT was invoked.\n*** This is disallowed by the MPI "
     "standard.\n[h1:57926] Local abort before MPI_INIT completed completed successfully, but am not able to "
     "aggregate error messages", "user_code", False, False, "TG-MPI-USAGE"),
    # ... while the runtime's own classes stay a transport error
    ("Fatal error in PMPI_Allreduce: Other MPI error, error stack:", "nccl_error", True, False, "TG-COMM-ERROR"),
    # MPI_ABORT is the program's abort: the reason it printed before decides ...
    ("NotImplementedError: Cannot handle local boundary\nMPI_ABORT was invoked on rank 1 in communicator "
     "MPI_COMM_WORLD\nwith errorcode 0.", "user_code", False, False, "TG-USER-EXCEPTION"),
    ("amrex::Abort::0::CUDA error 2 in file AMReX_Arena.cpp line 173: out of memory !!!\nMPI_ABORT was invoked on "
     "rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 6.", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # ... and alone it shows a failure, not its cause
    ("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 1.", "unknown", True, False,
     "TG-FAILED"),
    # accelerator memory in XLA's, Gaudi's, an OpenACC runtime's, PaddlePaddle's and MindSpore's words
    ("E pjrt_stream_executor_client.cc:2593] Execution of replica 0 failed: RESOURCE_EXHAUSTED: Failed to allocate "
     "request for 108.03GiB (116000729080B) on device ordinal 5", "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_SYNHELPER workspace Allocation of size ::6450192384 failed!",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("Accelerator Fatal Error: call to cuMemAlloc returned error 2 (CUDA_ERROR_OUT_OF_MEMORY): Out of memory",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("paddle.fluid.core_avx.EnforceNotMet: Out of memory error on GPU 0. Cannot allocate 1.2GB memory on GPU 0",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("RuntimeError: Malloc device memory failed, size[1073741824], ret[207001], Device 0 may be other processes "
     "occupying this card", "cuda_oom", False, False, "TG-CUDA-OOM"),
    # the TPU driver's client that cannot reach its TPU host
    ("E grpc_tpu_driver.cc:1070] Failed to open the gRPC driver: 4: Deadline Exceeded:\nTraceback (most recent "
     "call last):\n  File \"aiserver.py\", line 10214, in <module>", "node_or_infra", True, False, "TG-NETWORK"),
    # Grid Engine's wall-clock limit, PBS's request beyond the queue, srun's task launch on one node
    ("job 123456 exceeded hard wallclock time - initiate terminate method", "node_or_infra", True, False,
     "TG-TIME-LIMIT"),
    ("qsub: Job exceeds queue resource limits MSG=cannot satisfy queue max walltime requirement", "user_code", False,
     False, "TG-SLURM-REQUEST"),
    ("srun: error: Task launch for StepId=123.0 failed on node n3: Invalid node name specified", "node_or_infra",
     True, False, "TG-SLURM-STEP-LAUNCH"),
    # a signal's exit status as MPICH's Hydra and launchers that say "exited with status" print it
    ("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 3 PID 1234 RUNNING AT node07\n"
     "=   EXIT STATUS: 139", "segfault_or_signal", True, False, "TG-SIGSEGV"),
    ("mpiexec: Warning: task 0 exited with status 139", "segfault_or_signal", True, False, "TG-SIGSEGV"),
    # from messages written from their sources: TensorFlow's harmless allocator retry in its newer
    # words and its duplicate plugin registration, RCCL's iommu advice, Dynamo's recompile limit,
    # a corrected PCIe error (no SIGBUS), Dask's and UCX's advice: harmless
    ("W bfc_allocator.cc:296] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.13GiB with "
     "freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could be "
     "performance gains", "success_or_benign", True, False, "TG-BENIGN"),
    ("E cuda_dnn.cc:9342] Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when "
     "one has already been registered", "success_or_benign", True, False, "TG-BENIGN"),
    ('node-04:51233:51533 [0] NCCL WARN Missing "iommu=pt" from kernel command line which can lead to system '
     "instablity or hang!", "success_or_benign", True, False, "TG-BENIGN"),
    ("W0402 convert_frame.py:744] [0/8] torch._dynamo hit config.cache_size_limit (8)", "success_or_benign", True,
     False, "TG-BENIGN"),
    ("pcieport 0000:3a:00.0: AER: Corrected error received: 0000:3b:00.0\nnvidia 0000:3b:00.0: PCIe Bus Error: "
     "severity=Corrected, type=Physical Layer, (Receiver ID)", "success_or_benign", True, False, "TG-BENIGN"),
    ("distributed.worker.memory - WARNING - Unmanaged memory use is high. This may indicate a memory leak",
     "success_or_benign", True, False, "TG-BENIGN"),
    ("[1710166927.123456] [gpu-a03:48213:0] parser.c:2036 UCX  WARN  unused environment variable: "
     "UCX_IB_GPUDIRECT_RDMA (maybe: UCX_IB_GPU_DIRECT_RDMA?)", "success_or_benign", True, False, "TG-BENIGN"),
    # ... and healthy ends in LSF's, HTCondor's and the training operator's words
    ("Successfully completed.\n\nResource usage summary:\n\n    CPU time :   345678.00 sec.", "success_or_benign",
     True, False, "TG-BENIGN"),
    ("005 (1234.000.000) 2024-03-11 14:22:07 Job terminated.\n\t(1) Normal termination (return value 0)",
     "success_or_benign", True, False, "TG-BENIGN"),
    ("Normal  PyTorchJobSucceeded  pytorchjob-controller  PyTorchJob default/llama-ft successfully completed.",
     "success_or_benign", True, False, "TG-BENIGN"),
    # device memory: TensorFlow's copy to a full GPU
    ("InternalError: Failed copying input tensor from /job:localhost/replica:0/task:0/device:CPU:0 to "
     "/job:localhost/replica:0/task:0/device:GPU:0 in order to run _EagerConst: Dst tensor is not initialized.",
     "cuda_oom", False, False, "TG-CUDA-OOM"),
    # the build or the kernel's configuration: HIP without this GPU's code object, Triton's limits
    ('"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"\nAborted (core dumped)',
     "user_code", False, False, "TG-CUDA-USAGE"),
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144, Hardware limit: "
     "232448.", "user_code", False, False, "TG-CUDA-USAGE"),
    # Level Zero's lost device; the device plugin's Xid health check
    ("|CCL_ERROR| ze_call.cpp:43 do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists, code: "
     "ZE_RESULT_ERROR_DEVICE_LOST", "gpu_hardware", True, False, "TG-GPU-ERROR"),
    ("I0311 14:22:07.123456 1 health.go:164] XidCriticalError: Xid=79 on Device=GPU-3f2a1b4c; marking device as "
     "unhealthy.", "gpu_hardware", True, True, "TG-GPU-XID"),
    # accelerators held elsewhere, none exposed, a spot notice as the metadata service gives it
    ("ERROR  NRT:nrt_allocate_neuron_cores  NeuronCore(s) not available - Requested:32 Available:0",
     "node_or_infra", True, False, "TG-DEVICE-IN-USE"),
    ("WARNING: Could not find any nv files on this host!", "node_or_infra", True, True, "TG-GPU-NOT-EXPOSED"),
    ('{"action": "terminate", "time": "2024-03-11T14:24:00Z"}', "node_or_infra", True, False, "TG-PREEMPTED"),
    ("exiting program after receiving SIGTERM.", "node_or_infra", True, False, "TG-SIGTERM"),
    # memory: Dask's nanny restarting a worker past its budget (tune35), Vertex AI's replica out of memory
    ("distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting\ndistributed.nanny - INFO - Worker "
     "process 79862 was killed by signal 15", "host_oom", False, False, "TG-HOST-OOM"),
    ("The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL).", "host_oom",
     False, False, "TG-K8S-OOMKILLED"),
    # launches and credentials only the user can change
    ('The application appears to have been direct launched using "srun",\nbut OMPI was not built with SLURM\'s PMI '
     "support and therefore cannot\nexecute.", "user_code", False, False, "TG-USER-CONFIG"),
    ("google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/storage/v1/b/ml-data/o/x: "
     "trainer@p.iam.gserviceaccount.com does not have storage.objects.get access", "user_code", False, False,
     "TG-USER-CONFIG"),
    ("botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the GetObject operation: Access "
     "Denied", "user_code", False, False, "TG-USER-CONFIG"),
]

# Written from their sources by a session that saw neither the corpus nor the catalog: each in the
# component's own words (after tune35).
PROBED_FAMILIES = [
    # infrastructure: Go's resolver, conda and aiohttp over a bad network, Docker Hub's rate limit
    ('Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on '
     "127.0.0.53:53: server misbehaving", "node_or_infra", True, False, "TG-RENDEZVOUS"),
    ("CondaHTTPError: HTTP 000 CONNECTION FAILED for url <https://conda.anaconda.org/conda-forge/linux-64/repodata.json>",
     "node_or_infra", True, False, "TG-NETWORK"),
    ("aiohttp.client_exceptions.ClientPayloadError: Response payload is not completed", "node_or_infra", True, False,
     "TG-NETWORK"),
    ("docker: Error response from daemon: toomanyrequests: You have reached your pull rate limit. You may increase "
     "the limit by authenticating and upgrading", "node_or_infra", True, False, "TG-K8S-IMAGE-PULL-TRANSIENT"),
    # the node's clock, its process limits, its temporary directories
    ("botocore.exceptions.ClientError: An error occurred (RequestTimeTooSkewed) when calling the PutObject operation: "
     "The difference between the request time and the current time is too large.", "node_or_infra", True, True,
     "TG-CLOCK-SKEW"),
    ("OpenBLAS blas_thread_init: pthread_create failed for thread 47 of 64: Resource temporarily unavailable\n"
     "OpenBLAS blas_thread_init: RLIMIT_NPROC 4096 current, 4096 max", "node_or_infra", False, False,
     "TG-PROCESS-LIMIT"),
    ("cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice", "node_or_infra", False,
     False, "TG-PROCESS-LIMIT"),
    ("FileNotFoundError: [Errno 2] No usable temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp']",
     "node_or_infra", False, False, "TG-DISK-FULL"),
    # the Hub's gated repository: the user's access
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error.\n\nCannot access gated repo for url "
     "https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json.", "user_code", False, False,
     "TG-USER-CONFIG"),
    # the kernel's hung-task report
    ("INFO: task python:12345 blocked for more than 120 seconds.\n      Tainted: P           OE     5.15.0-105-generic\n"
     '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.', "hang_or_stuck", True, False,
     "TG-STALL"),
    # harmless: the Trainer's FLOP estimate, TensorFlow's end of input and partial cache, XLA's notices
    ("Could not estimate the number of tokens of the input, floating-point operations will not be computed",
     "success_or_benign", True, False, "TG-BENIGN"),
    ("I tensorflow/core/framework/local_rendezvous.cc:404] Local rendezvous is aborting with status: OUT_OF_RANGE: "
     "End of sequence", "success_or_benign", True, False, "TG-BENIGN"),
    ("W external/xla/xla/service/gpu/nvptx_compiler.cc:760] The NVIDIA driver's CUDA version is 12.2 which is older "
     "than the ptxas CUDA version (12.4.131). Because the driver is older than the ptxas version, XLA is disabling "
     "parallel compilation, which may slow down compilation.", "success_or_benign", True, False, "TG-BENIGN"),
    ("E external/xla/xla/service/slow_operation_alarm.cc:65] Constant folding an instruction is taking > 1s:",
     "success_or_benign", True, False, "TG-BENIGN"),
    # healthy ends and progress: Keras, Detectron2, ultralytics, ESPnet, Ray Tune, Lightning, Composer
    ("Epoch 15: early stopping\nRestoring model weights from the end of the best epoch: 10.", "success_or_benign", True,
     False, "TG-BENIGN"),
    ("[05/01 12:00:00 d2.engine.hooks]: Overall training speed: 89997 iterations in 8:12:34 (0.3284 s / it)",
     "success_or_benign", True, False, "TG-BENIGN"),
    ("50 epochs completed in 2.345 hours.\nOptimizer stripped from runs/detect/train/weights/last.pt, 6.2MB",
     "success_or_benign", True, False, "TG-BENIGN"),
    ("[gpu-node-01] 2024-05-01 12:00:00,000 (trainer:379) INFO: The training was finished at 40 epochs",
     "success_or_benign", True, False, "TG-BENIGN"),
    ("Trial TorchTrainer_3f2a1_00000 completed after 10 iterations at 2024-05-01 12:00:00.", "success_or_benign",
     True, False, "TG-BENIGN"),
    ("Epoch 4, global step 500: 'val_loss' reached 0.31245 (best 0.31245), saving model to "
     "'/ckpt/epoch=4-step=500.ckpt' as top 3", "success_or_benign", True, False, "TG-PROGRESS"),
    ("[batch=1000/1000]:\n\t Train time/batch: 999\n\t Train loss/train/total: 2.3456", "success_or_benign", True,
     False, "TG-PROGRESS"),
    # the kernel's RCU stall, slurmctld giving up on a node, nvidia-smi finding no GPU, the driver's
    # version mismatch, a fatal PCIe error on the GPU itself, TensorFlow's collective deadline
    ("rcu: INFO: rcu_sched self-detected stall on CPU\nrcu: \t17-....: (5249 ticks this GP) idle=8e2/1/0x4000",
     "hang_or_stuck", True, False, "TG-STALL"),
    ("[2024-05-01T11:41:07.118] error: Nodes gpu-node-06 not responding, setting DOWN", "node_or_infra", True, True,
     "TG-NODE-FAIL"),
    ("No devices were found", "node_or_infra", True, True, "TG-GPU-NOT-EXPOSED"),
    ("NVRM: API mismatch: the client has the version 550.90.07, but\nNVRM: this kernel module has the version "
     "535.161.08.", "gpu_hardware", True, True, "TG-GPU-DRIVER"),
    ("nvidia 0000:9b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
     "gpu_hardware", True, True, "TG-GPU-LOST"),
    ("tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective ops is aborted by: Deadline Exceeded",
     "nccl_timeout", True, False, "TG-NCCL-TIMEOUT"),
    # ... and what is not a fault: nvidia-smi's clock slowdown is no S3 throttling; Megatron's timers,
    # Lightning's Timer ending a run on time
    ("        HW Slowdown                       : Active", "unknown", True, False, "TG-UNKNOWN"),
    ("(min, max) time across ranks (ms):\n    forward-backward ...............................: (3412.18, 3415.02)",
     "success_or_benign", True, False, "TG-PROGRESS"),
    ("Time limit reached. Elapsed time is 3:59:00. Signaling Trainer to stop.", "success_or_benign", True, False,
     "TG-BENIGN"),
    # the kernel's trap line for an instruction the CPU lacks; Ray's worker death with no error of its
    # own; Arrow's and the JVM's host allocations; NCCL's CUDA call out of memory with its number;
    # Open MPI's retry-count help text, wrapped as it prints it
    ("traps: python3[22817] trap invalid opcode ip:7f55c0a1b3f2 sp:7ffc3e2d1a80 error:0 in libtorch_cpu.so",
     "segfault_or_signal", False, False, "TG-FATAL-SIGNAL"),
    ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
     "the problem, check the logs for the dead worker.", "node_or_infra", True, False, "TG-NODE-LOST"),
    ("pyarrow.lib.ArrowMemoryError: malloc of size 4294967296 failed", "host_oom", False, False, "TG-HOST-ENOMEM"),
    ("# There is insufficient memory for the Java Runtime Environment to continue.\n# Native memory allocation (mmap) "
     "failed to map 2147483648 bytes", "host_oom", False, False, "TG-HOST-ENOMEM"),
    ("gpu-node-07:48213:48890 [2] NCCL WARN Cuda failure 2 'out of memory'\ngpu-node-07:48213:48890 [2] NCCL INFO "
     "include/alloc.h:124 -> 1", "cuda_oom", False, False, "TG-CUDA-OOM"),
    ("The InfiniBand retry count between two MPI processes has been\nexceeded.  \"Retry count\" is defined in the "
     "InfiniBand spec 1.2", "nccl_error", True, False, "TG-COMM-ERROR"),
    # start-up lines with nothing after them: Accelerate's defaults, TensorFlow's GPU discovery
    ("The following values were not passed to `accelerate launch` and had defaults used instead:\n\t`--num_processes` "
     "was set to a value of `8`", "hang_or_stuck", True, False, "TG-START-STALL"),
    ("I external/local_xla/xla/stream_executor/cuda/cuda_executor.cc:901] successful NUMA node read from SysFS had "
     "negative value (-1), but there must be at least one NUMA node, so returning NUMA node zero.", "hang_or_stuck",
     True, False, "TG-START-STALL"),
]

TUNE36_FAMILIES = [
    # PyTorch's caching allocator warning as a request fails: the device is full, whatever its prefix
    ("[W1203 10:01:02.123456789 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 1 while "
     "trying to allocate 2147483648 bytes (free: 104857600, total: 85899345920).", "cuda_oom", False, False,
     "TG-CUDA-OOM"),
    # LightGBM's own collective layer losing a peer's socket
    ("lightgbm.basic.LightGBMError: Socket send error, code: 104", "nccl_error", True, False, "TG-COMM-ERROR"),
    # a Dask worker paused at its memory pause fraction runs no task, so a collective on it waits
    ("distributed.worker.memory - WARNING - Worker is at 85% memory usage. Pausing worker.  Process memory: 6.80 GiB "
     "-- Worker memory limit: 8.00 GiB", "host_oom", False, False, "TG-HOST-OOM"),
    # progress in MindSpore's, LightGBM's and XGBoost's words
    ("epoch: 3 step: 120, loss is 0.4521", "success_or_benign", True, False, "TG-PROGRESS"),
    ("[42]\tvalid_0's binary_logloss: 0.31234\tvalid_0's auc: 0.9121", "success_or_benign", True, False,
     "TG-PROGRESS"),
    ("[7]\tvalidation_0-rmse:0.48211\tvalidation_1-rmse:0.50310", "success_or_benign", True, False, "TG-PROGRESS"),
    ("Early stopping, best iteration is:\n[57]\tvalid_0's l2: 0.1932", "success_or_benign", True, False,
     "TG-PROGRESS"),
]

TUNE37_FAMILIES = [
    # a preemption spelt with a hyphen, as Azure ML and others write it
    ("Job failed. PreemptionError: the nodes of this job got pre-empted.", "node_or_infra", True, False,
     "TG-NODE-LOST"),
    ("Reason: Received pre-emption warning signal", "node_or_infra", True, False, "TG-NODE-LOST"),
    # the end of the Hugging Face Trainer's start-up banner, then nothing: no first step was taken
    ("[INFO|trainer.py:2321] 2025-01-02 10:00:00,000 >>   Total optimization steps = 1,200\n"
     "[INFO|trainer.py:2322] 2025-01-02 10:00:00,010 >>   Number of trainable parameters = 6,738,415,616",
     "hang_or_stuck", True, False, "TG-START-STALL"),
    # ... and the same banner with a logged step after it: training runs
    ("  Number of trainable parameters = 124,439,808\n{'loss': 3.2117, 'grad_norm': 1.52, 'learning_rate': 4.9e-05, "
     "'epoch': 0.02}", "success_or_benign", True, False, "TG-PROGRESS"),
]

TUNE38_FAMILIES = [
    # Paddle's signal handler names the signal; the process reports its own crash (not retried)
    ("FatalError: `Process abort signal` is detected by the operating system.\n  [TimeInfo: *** Aborted at "
     "1700000000 (unix time) try \"date -d @1700000000\" if you are using GNU date ***]", "segfault_or_signal",
     False, False, "TG-SIGABRT-BUG"),
    ("FatalError: Process abort signal is detected by the operating system.", "segfault_or_signal", False, False,
     "TG-SIGABRT-BUG"),
    ("FatalError: `Erroneous arithmetic operation` is detected by the operating system.", "segfault_or_signal",
     False, False, "TG-FATAL-SIGNAL"),
    ("FatalError: `Access to an undefined portion of a memory object` is detected by the operating system.",
     "segfault_or_signal", False, False, "TG-SIGBUS-LIB"),
    # CPython's own consistency check, then the abort it causes
    ("Fatal Python error: Python memory allocator called without holding the GIL\n\nCurrent thread "
     "0x00007f0000001000 (most recent call first):\n  File \"train.py\", line 12 in step\nAborted (core dumped)",
     "segfault_or_signal", False, False, "TG-SIGABRT-BUG"),
    # a training operator's summary says more than nothing only when the pod's exit code is not beside it
    ("Pod: default.train-master-0 exited with code 1\nPyTorchJob train is restarting because 1 Master replica(s) "
     "failed.", "user_code", False, False, "TG-CHILD-FAILED"),
    ("TFJob dist-mnist has failed because 2 Worker replica(s) failed.", "node_or_infra", True, False,
     "TG-NODE-LOST"),
    # Ray's object store lost every copy of an object with the node that held it
    ("ray.exceptions.ObjectLostError: Failed to retrieve object 00ffffffffffffffffffffffffffffffffffffff0100000001000000. "
     "All copies of 00ffffffffffffffffffffffffffffffffffffff0100000001000000 have been lost due to node failure.",
     "node_or_infra", True, False, "TG-NODE-LOST"),
]

# (line, category, retryable, node fault, fault code): every table above.
FAMILIES = (WIDENED + TUNE3_FAMILIES + TUNE4_FAMILIES + TUNE5_FAMILIES + TUNE6_FAMILIES + TUNE7_FAMILIES
            + TUNE8_FAMILIES + TUNE9_TO_15_FAMILIES + TUNE29_FAMILIES + TUNE30_FAMILIES + TUNE31_FAMILIES
            + TUNE32_FAMILIES + TUNE33_FAMILIES + TUNE34_FAMILIES + PROBED_FAMILIES + TUNE36_FAMILIES
            + TUNE37_FAMILIES + TUNE38_FAMILIES)


@pytest.mark.parametrize("text,category,retryable,node_fault,code", FAMILIES,
                         ids=lambda v: v[:48] if isinstance(v, str) else "")
def test_the_catalog_knows_each_family(text, category, retryable, node_fault, code):
    verdict = classify(text)
    assert (verdict.category.value, verdict.retryable, verdict.node_fault, verdict.fault_code) == \
        (category, retryable, node_fault, code), verdict.classifier
    if category == "user_code":
        assert verdict.user_error
    if retryable:
        assert not verdict.user_error  # a fault the user must fix is never retried as is


# The tune5 families' words without their fault: each must keep the verdict it had.
TUNE5_NEAR_MISSES = [
    # the same collective at the same sequence number on every rank: an ordinary (retryable) timeout
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=512, OpType=ALLREDUCE, NumelIn=1, "
     "NumelOut=1, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.\n[Rank 1] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=512, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
     "Timeout(ms)=600000) ran for 600020 milliseconds before timing out.", "nccl_timeout", "TG-NCCL-TIMEOUT"),
    # an operation name that is a prefix of the other's is still a different collective only when it differs
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=_ALLGATHER_BASE, "
     "Timeout(ms)=1800000) ran for 1800001 milliseconds before timing out.\n[Rank 5] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=9, OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1800002 "
     "milliseconds before timing out.", "nccl_timeout", "TG-NCCL-TIMEOUT"),
    # different collectives at different sequence numbers: ranks at different points, not a mismatch shown
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40, OpType=ALLREDUCE, "
     "Timeout(ms)=600000) ran for 600011 milliseconds before timing out.\n[Rank 1] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=41, OpType=BROADCAST, Timeout(ms)=600000) ran for 600020 milliseconds "
     "before timing out.", "nccl_timeout", "TG-NCCL-TIMEOUT"),
    # the program's own host memory stays host_oom
    ("OSError: [Errno 12] Cannot allocate memory", "host_oom", "TG-HOST-ENOMEM"),
    ("gpu-3:4411:4411 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)\n",
     "hang_or_stuck", "TG-NCCL-INIT-STALL"),
    # a host with no NVIDIA kernel driver at all is the driver, not the container
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:318] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no "
     "CUDA-capable device is detected", "gpu_hardware", "TG-GPU-DRIVER"),
    # a JAX barrier later in the run is a collective that timed out, not the start-up connect
    ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
     "sync_global_devices_3", "nccl_timeout", "TG-NCCL-TIMEOUT"),
    # a pod that ended by itself (Failed, Succeeded) and carries no deletion time
    ("controller_utils.go:812] Ignoring inactive pod default/demo-worker-3 in state Failed, deletion time <nil>\n",
     "unknown", "TG-UNKNOWN"),
    ("controller_utils.go:812] Ignoring inactive pod default/demo-worker-3 in state Succeeded, deletion time <nil>\n",
     "unknown", "TG-UNKNOWN"),
    # later checkpoints are progress; a line that merely ends in "done" is no finish
    ("INFO:tensorflow:Saving checkpoints for 0 into /tmp/run/model.ckpt.\nINFO:tensorflow:loss = 2.302, step = 0\n"
     "INFO:tensorflow:Saving checkpoints for 1000 into /tmp/run/model.ckpt.\n", "success_or_benign",
     "TG-PROGRESS"),
    ("summary writer flush done\n", "unknown", "TG-UNKNOWN"),
]


@pytest.mark.parametrize("text,category,code", TUNE5_NEAR_MISSES, ids=lambda v: v[:48] if isinstance(v, str) else "")
def test_the_tune5_near_misses_keep_their_verdict(text, category, code):
    verdict = classify(text)
    assert (verdict.category.value, verdict.fault_code) == (category, code), verdict.classifier


# The tune6 families' words without their fault: each must keep the verdict it had.
TUNE6_NEAR_MISSES = [
    # shards loaded, then training runs: progress, not a stall
    ("Loading checkpoint shards: 100%|##########| 4/4 [00:08<00:00,  2.1s/it]\n{'loss': 2.31, 'epoch': 0.1}\n",
     "success_or_benign", "TG-PROGRESS"),
    # a pull that failed because the image is not there is the pod spec's
    ('Failed to pull image "registry.example.com/train:1.0": manifest unknown', "user_code", "TG-K8S-CONFIG"),
    # a step cancelled under its job, with no unkillable aftermath
    ("slurmstepd: error: *** STEP 100.0 ON gpu07 CANCELLED AT 2024-01-01T10:00:00 ***", "node_or_infra",
     "TG-SLURM-STEP-CANCELLED"),
    # a Ray worker dead with no memory notice stays a system failure
    ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR", "node_or_infra",
     "TG-NODE-LOST"),
]


# The tune7 families' words without their fault: each must keep the verdict it had.
TUNE7_NEAR_MISSES = [
    # a zero bar that later moves on is no stall
    ("  0%|          | 0/500 [02:00<?, ?it/s]\n 10%|#         | 50/500 [03:00<27:00,  3.60s/it]", "unknown",
     "TG-UNKNOWN"),
    # the DeepSpeed version line followed by training is progress
    ("[Rank 0] DeepSpeed info: version=0.12.6, git-hash=abc123, git-branch=master\n{'loss': 2.31, 'epoch': 0.1}",
     "success_or_benign", "TG-PROGRESS"),
    # a gloo peer reset without gRPC's status stays a collective transport error
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer",
     "nccl_error", "TG-COMM-ERROR"),
    # a bar at 100% with a description is not one stuck at 0%
    ("Epoch 0: 100%|##########| 500/500 [12:03<00:00,  1.45s/it]", "success_or_benign", "TG-PROGRESS"),
    # a CHECK that names device memory is the memory, not the program
    ("F0101 10:00:00.000000  1234 allocator.cc:50] Check failed: ptr != nullptr CUDA out of memory. Tried to "
     "allocate 2.00 GiB", "cuda_oom", "TG-CUDA-OOM"),
]


@pytest.mark.parametrize("text,category,code", TUNE6_NEAR_MISSES + TUNE7_NEAR_MISSES,
                         ids=lambda v: v[:48] if isinstance(v, str) else "")
def test_the_tune6_and_tune7_near_misses_keep_their_verdict(text, category, code):
    verdict = classify(text)
    assert (verdict.category.value, verdict.fault_code) == (category, code), verdict.classifier


def test_a_rank_error_outranks_the_step_it_left_unkillable():
    verdict = classify("ValueError: could not convert string to float: 'abc'\n"
                       "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
                       "srun: error: Timed out waiting for job step to complete\n")
    assert (verdict.category.value, verdict.retryable) == ("user_code", False)


def test_a_stalled_step_abort_alone_stays_unknown():
    verdict = classify("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n")
    assert (verdict.category.value, verdict.retryable) == ("unknown", True)


def test_an_old_kubectl_listing_names_the_not_ready_node():
    verdict = classify("NAME        STATUS     AGE       VERSION\ngpu-node-6  Ready      3d        v1.7.5\n"
                       "gpu-node-7  NotReady   3d        v1.7.5\n")
    assert (verdict.fault_code, verdict.node) == ("TG-NODE-EVENT", "gpu-node-7")


# Start-up lines followed by a run that went on (progress, a clean finish): not a hang.
STARTED_AND_RAN = [
    "***** Running training *****\n  Num examples = 1000\n{'loss': 0.41, 'learning_rate': 1e-05, 'epoch': 1.0}\n"
    "{'train_runtime': 312.4, 'train_samples_per_second': 9.6, 'epoch': 3.0}\n",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default\n"
    "Epoch 3: 100%|██████████| 195/195 [01:58<00:00,  1.64it/s, loss=0.391]\n",
    "> initializing torch distributed ...\n> setting random seeds to 1234 ...\n iteration      100/    1000 | "
    "lm loss: 6.512E+00 |\ntraining completed\n",
    "Using /tmp/ext as PyTorch extensions root...\nUserWarning: TypedStorage is deprecated\n",
    "I1124 torch/distributed/elastic/agent/server/api.py:879] [default] Starting worker group\n"
    "Epoch 1:  45%|████▌     | 450/1000 [10:00<12:13,  0.75it/s, loss=2.31]\n",
    "2022-01-28 12:00:05,814 INFO: Start training from epoch: 0, iter: 0\n2022-01-28 12:01:10,100 INFO: "
    "[train..][epoch:  0, iter:     100, lr:(2.000e-04,)] [eta: 6 days, 1:10:02, time (data): 0.650 (0.010)] "
    "l_pix: 2.1e-02\n",
]


@pytest.mark.parametrize("text", STARTED_AND_RAN, ids=lambda v: v[:40])
def test_start_up_lines_then_a_run_are_not_a_hang(text):
    assert classify(text).category is Category.SUCCESS_OR_BENIGN


# Lines that mention a family's words without showing its fault: they must not match it.
NEAR_MISSES = [
    # two py-spy-like frames are not a dump; one lock taken is not a wait
    ("    forward (model.py:90)\n    step (train.py:12)\n", "unknown"),
    ("DEBUG: Attempting to acquire lock 140192009925296 on /tmp/cache.lock\n"
     "DEBUG: Lock 140192009925296 acquired on /tmp/cache.lock\n", "unknown"),
    ("== Status ==\nNumber of trials: 4 ({'TERMINATED': 3, 'ERROR': 1})\n", "unknown"),  # not every trial finished
    ("timeout: 1800\nnccl_timeout_minutes: 30\nheartbeat_timeout_sec: 600\n", "unknown"),
    ("--ddp-timeout 7200 --save-steps 500 --max-grad-norm 1.0\n", "unknown"),
    ("Remapped Rows\n        Pending                           : No\n"
     "        Remapping Failure Occurred        : No\n", "unknown"),
    ("Il personaggio è stato ucciso nel capitolo 3\n", "unknown"),
    ("config: oom_killer_policy=off, cuda_oom_retry=false\n", "unknown"),
    ("[default0]:WARNING:torch.distributed.run:\nSetting OMP_NUM_THREADS environment variable for each process to "
     "be 1 in default, to avoid your system being overloaded\n", "success_or_benign"),
    ("Epoch 1: train_loss=0.2314 val_loss=0.1904\n", "success_or_benign"),
    # the tune3 families' words without their fault
    ("[ 9120.5] amdgpu 0000:c3:00.0: amdgpu: GPU reset succeeded, trying to resume\n", "unknown"),
    ("node_pool: spot  # jobs may be preempted and are then requeued automatically\n", "unknown"),
    ("gpu-node-7  Ready      3d        v1.7.5\n", "unknown"),
    ("XLA_FLAGS=--xla_gpu_enable_backend_initialization_logging\n", "unknown"),
    ("gpu3:901:950 [0] NCCL INFO Attribute coll of node nic was set to 1\n", "hang_or_stuck"),
    ("LAUNCH ERROR 2024-05-01 10:00:00,123 worker 3 exited with code 2\n", "unknown"),
    ("unit test: abstract base has a pure virtual method\n", "unknown"),
    # the tune4 families' words without their fault
    ("memory allocation of 4096 bytes succeeded after retry\n", "unknown"),
    ("resource_exhausted_retries: 3  # Out of memory handling\n", "unknown"),
    ("Aborted by user request; cleaning up\n", "unknown"),
    ("curl returned 200 for https://example.com/status\n", "unknown"),
    ("srun: Waiting for job step to complete\n", "unknown"),
    ("SamplesPerSec=nan is not measured in this mode\n", "unknown"),
    ("slurmstepd: error: *** STEP 4242.0 ON gpu-7 CANCELLED AT 2024-04-23T12:18:08 ***\n", "node_or_infra"),
    # the tune31 families' words without their fault: Keras's epoch header alone is a start, not
    # progress; a Tune status with a trial running is not a wait
    ("Train on 60000 samples, validate on 10000 samples\nEpoch 1/6\n", "unknown"),
    ("== Status ==\nNumber of trials: 2/2 (1 PENDING, 1 RUNNING)\n", "unknown"),
    # the tune32 families' words without their fault
    ("zsh: command not found: nvidia-smi-dcgm\n", "user_code"),
    ("export NCCL_NET_PLUGIN=aws-ofi  # NET/OFI provider is chosen at init\n", "unknown"),
    ("mount: /dev/accel0 is the first TPU chip on this VM\n", "unknown"),
]


@pytest.mark.parametrize("text,category", NEAR_MISSES, ids=lambda v: v[:40] if isinstance(v, str) else "")
def test_near_misses_do_not_match(text, category):
    assert classify(text).category.value == category


def test_the_evidence_is_the_line_that_shows_the_fault():
    text = ("NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\nUserWarning: something harmless\n"
            "[PG ID 0 PG GUID 0 Rank 2] Work timeout is detected by watchdog at work: 17, last enqueued NCCL "
            "work: 17, last completed NCCL work: 16.\nterminate called after throwing an instance of "
            "'c10::DistBackendError'\n")
    verdict = classify(text)
    assert verdict.fault_code == "TG-NCCL-TIMEOUT"
    assert verdict.evidence.startswith("[PG ID 0 PG GUID 0 Rank 2] Work timeout is detected by watchdog")


@pytest.mark.parametrize("decorate", [
    lambda line: f"> {line}",  # a quoted paste
    lambda line: f">> > {line}",  # quoted in a reply to a quote
    lambda line: f"\x1b[1m\x1b[31m{line[:4]}\x1b[0m{line[4:]}\x1b[K",  # colour codes inside the line
    lambda line: f"Epoch 3:  42%|####      | 420/1000 [01:02<01:26]\r{line}\r",  # after a tqdm redraw, CRLF
])
def test_quote_markers_and_colour_codes_do_not_hide_a_line(decorate):
    # Patterns anchored at a line's start ("zsh: killed" is what zsh prints as a whole line) must
    # still find it when the paste is quoted or the terminal coloured it.
    plain = "zsh: killed     python train.py --config big.yaml"
    assert classify(plain).fault_code == "TG-SIGKILL"
    verdict = classify(f"step 10 loss 2.1\n{decorate(plain)}\n")
    assert (verdict.category.value, verdict.fault_code, verdict.evidence) == ("host_oom", "TG-SIGKILL", plain)


@pytest.mark.parametrize("text,category,retryable,code", KNOWLEDGE, ids=lambda v: v[:48] if isinstance(v, str) else "")
def test_the_catalog_knows(text, category, retryable, code):
    verdict = classify(text)
    assert (verdict.category.value, verdict.retryable, verdict.fault_code) == (category, retryable, code), \
        verdict.classifier
    if category == "user_code":
        assert verdict.user_error


# How launchers, schedulers, containers and shells report that a process died of signal N: every
# form holds for every signal the catalog names (``signal:`` in patterns.yaml), not only for the
# signal whose report someone once pasted. SIGSEGV from a launcher is retried (a process's own
# report of it is not); SIGABRT from a launcher is too; SIGBUS is not (mostly a container's small
# /dev/shm, which the same placement hits again); SIGKILL is the OOM killer.
SIGNAL_REPORTS = [
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -{n}) local_rank: 0 (pid: 4242)",
    "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status -{n}.",
    "Process finished with exit code {s} (interrupted by signal {n}: {name})",
    "The replica workerpool0-0 exited with a non-zero status of {s}.",
    "    Exit Code:    {s}",
    "task 0 exit status {s}",
    "worker exited with code {s}",
    "mpirun noticed that process rank 3 with PID 0 on node gpu-7 exited on signal {n} ({name}).",
    "=   KILLED BY SIGNAL: {n} ({name})",
    "  traceback : Signal {n} ({name}) received by PID 4242",
    "RuntimeError: DataLoader worker died with <Signals.{name}: {n}>",
    "fish: Job 1, 'python train.py' terminated by signal {name} (Kill)",
]
SIGNAL_CODES = [(9, "TG-SIGKILL", "host_oom", False), (15, "TG-SIGTERM", "node_or_infra", True),
                (11, "TG-SIGSEGV", "segfault_or_signal", True), (7, "TG-SIGBUS", "segfault_or_signal", False),
                (6, "TG-SIGABRT", "segfault_or_signal", True), (1, "TG-SIGHUP", "segfault_or_signal", True)]


@pytest.mark.parametrize("number,code,category,retryable", SIGNAL_CODES, ids=lambda v: str(v))
@pytest.mark.parametrize("form", SIGNAL_REPORTS, ids=lambda v: v[:32])
def test_every_report_of_a_signal_names_it(form, number, code, category, retryable):
    import signal

    text = form.format(n=number, s=128 + number, name=signal.Signals(number).name)
    verdict = classify("step 12 loss 1.93\n" + text + "\n")
    assert (verdict.fault_code, verdict.category.value, verdict.retryable) == (code, category, retryable), text
    # a different number is a different signal, and no substring of one
    other = form.format(n=number + 20, s=148 + number, name="SIGNONE")
    assert classify(other).fault_code != code, other


@pytest.mark.parametrize("entry,why", [
    ({"signal": 99}, "signal must be a signal number, not 99"),
    ({"signal": "SIGKILL"}, "signal must be a signal number, not 'SIGKILL'"),
    ({"signal": True}, "signal must be a signal number, not True"),
    ({}, r"missing keys \['regex'\]"),
])
def test_a_catalog_entry_names_a_real_signal_or_a_regex(entry, why):
    from trainguard.errors import PluginError
    from trainguard.plugins.log_classifier import parse_catalog

    base = {"id": "mine", "category": "segfault_or_signal", "fault_code": "X", "retryable": True}
    with pytest.raises(PluginError, match=why):
        parse_catalog({"patterns": [{**base, **entry}]}, "site.yaml")
    # a signal alone is a whole entry; with a regex, both match
    both = parse_catalog({"patterns": [{**base, "signal": 9, "regex": "(?i)reaped by the OOM"}]}, "site.yaml")[0]
    assert {"exitcode\\s*:\\s*-9\\b", "(?i)reaped by the OOM"} <= set(both.regex.split("|"))


def test_slurm_launcher_errors_beat_what_a_rank_printed():
    rank = "RuntimeError: CUDA error: an illegal memory access was encountered\nKeyError: 'x'\n"
    verdict = classify(rank + "srun: error: Unable to confirm allocation for job 42: Expired or invalid job\n")
    assert (verdict.fault_code, verdict.category.value, verdict.retryable, verdict.node_fault,
            verdict.user_error) == ("TG-SLURM-CONTROLLER", "node_or_infra", True, False, False)


@pytest.mark.parametrize("text", ["", "\n\n", "loading data from /data/shards\nstarting rank 3 of 8\n",
                                  "some free text a user wrote\n"])
def test_no_evidence_is_unknown_not_benign(text):
    """Nor is it the user's fault: a restart plausibly succeeds (the ladder bounds how often)."""
    verdict = HOST.classify(Fault(ErrorSource.LOG, time.time()), text, Policy())
    assert (verdict.category, verdict.fault_code, verdict.retryable) == (Category.UNKNOWN, "TG-UNKNOWN", True)
    assert not verdict.user_error and not verdict.node_fault


WARNING_ONLY = ("[rank0]:[W730 15:32:17.841273251 ProcessGroupNCCL.cpp:1479] Warning: WARNING: "
                "destroy_process_group() was not called before program exit, which can leak resources.\n")


@pytest.mark.parametrize("fault", [{"exit_code": 137}, {"exit_code": -9}, {"signal": 9}])
def test_a_harmless_warning_never_outranks_a_kill(fault):
    verdict = classify(WARNING_ONLY, **fault)
    assert (verdict.category.value, verdict.fault_code, verdict.retryable) == ("host_oom", "TG-SIGKILL", False)


@pytest.mark.parametrize("fault,expected", [
    ({"signal": 1}, ("segfault_or_signal", "TG-SIGHUP", True)),
    ({"exit_code": 129}, ("segfault_or_signal", "TG-SIGHUP", True)),
    ({"exit_code": -15}, ("node_or_infra", "TG-SIGTERM", True)),
    ({"exit_code": 139}, ("segfault_or_signal", "TG-SIGSEGV", True)),
    ({"signal": 8}, ("segfault_or_signal", "TG-SIGFPE", False)),
    ({"signal": 10}, ("segfault_or_signal", "TG-SIGUSR1", False)),
])
def test_a_signal_alone_says_how_the_process_died(fault, expected):
    verdict = classify("", **fault)
    assert (verdict.category.value, verdict.fault_code, verdict.retryable) == expected


def test_a_failed_exit_with_only_a_warning_is_unknown():
    verdict = classify(WARNING_ONLY, exit_code=1)
    assert (verdict.category, verdict.fault_code) == (Category.UNKNOWN, "TG-UNKNOWN")
    assert classify(WARNING_ONLY, exit_code=0).category is Category.SUCCESS_OR_BENIGN


def _cli(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_cli_kill_with_only_a_harmless_warning_is_a_kill(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(WARNING_ONLY)
    for option in (["--exit-code", "137"], ["--signal", "SIGKILL"]):
        verdict = _cli("classify", str(log), *option, "--json")
        assert (verdict["category"], verdict["fault_code"], verdict["retryable"]) == ("host_oom", "TG-SIGKILL", False)
    assert _cli("classify", str(log), "--json")["category"] == "success_or_benign"
    silent = tmp_path / "silent.log"
    silent.write_text("starting rank 0\n")
    assert _cli("classify", str(silent), "--json")["category"] == "unknown"
