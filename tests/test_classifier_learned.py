"""The learned fallback classifier (trainguard/plugins/learned_classifier.py, issue 13 item 4).

The excerpts here are synthetic, written for these tests (no corpus text). The fallback is on
by default (it beats the patterns alone on the untouched holdout files); the tests that need it
say so with TRAINGUARD_LEARNED_FALLBACK=1 all the same, so that a user's environment cannot
turn them into tests of the catalog.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from conftest import REPO
from trainguard.hooks import PluginHost
from trainguard.model import ErrorSource, Fault
from trainguard.plugins import learned_classifier
from trainguard.plugins.log_classifier import catalog_for
from trainguard.policy import Policy

HOST = PluginHost(load_entry_points=False)

CUDA_OOM = "allocator could not reserve device memory for the activations\ngpu memory is exhausted, reduce the batch size\n"
NCCL_TIMEOUT = ("collective operation allreduce did not complete within the timeout\n"
                "watchdog thread detected the operation exceeded its timeout and aborted the communicator\n")
HOST_OOM = "the kernel oom killer selected the python process\nsystem memory exhausted on the host, process killed\n"
USER_CODE = "attributeerror raised in the user module: object has no attribute forward\n"
BENIGN_LOOKING = "model weights loaded, evaluation accuracy is good\nall ranks finished their epoch\n"


@pytest.fixture
def enabled(monkeypatch):
    monkeypatch.setenv(learned_classifier.ENABLE_VAR, "1")


def classify(text: str, **fault):
    source = ErrorSource.EXIT_CODE if fault else ErrorSource.LOG
    return HOST.classify(Fault(source, time.time(), **fault), text, Policy())


def test_training_script_reproduces_the_shipped_model():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "train_fallback.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_registered_on_by_default_and_can_be_turned_off(monkeypatch):
    assert "learned_classifier" in HOST.plugin_names
    monkeypatch.delenv(learned_classifier.ENABLE_VAR, raising=False)
    assert classify(CUDA_OOM).classifier == "learned:cuda_oom"
    monkeypatch.setenv(learned_classifier.ENABLE_VAR, "0")
    assert classify(CUDA_OOM).category.value == "unknown"


@pytest.mark.parametrize("text, label, code", [
    (CUDA_OOM, "cuda_oom", "TG-CUDA-OOM"),
    (NCCL_TIMEOUT, "nccl_timeout", "TG-NCCL-TIMEOUT"),
    (HOST_OOM, "host_oom", "TG-HOST-OOM"),
    (USER_CODE, "user_code", "TG-USER-EXCEPTION"),
])
def test_a_no_pattern_excerpt_gets_the_learned_verdict(enabled, text, label, code):
    patterns = HOST.patterns()
    assert catalog_for(patterns).matches(text) == []  # no pattern speaks of it
    verdict = classify(text)
    assert (verdict.category.value, verdict.fault_code, verdict.classifier) == (label, code, f"learned:{label}")
    assert verdict.confidence < min(p.confidence for p in patterns if p.category.value != "unknown")
    assert verdict.evidence and verdict.evidence in text
    assert verdict.node_fault is False  # a guess never isolates a node
    assert verdict.retryable is learned_classifier.FAMILY[label][1]  # the texts show no program error


def test_a_pattern_match_keeps_the_pattern_verdict_and_the_model_is_not_asked(enabled, monkeypatch):
    read = []
    judge = learned_classifier.judge
    monkeypatch.setattr(learned_classifier, "judge", lambda text, **how: read.append(text) or judge(text, **how))
    text = CUDA_OOM + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    verdict = classify(text)
    assert verdict.classifier.startswith("log_classifier:")
    assert verdict.fault_code == "TG-CUDA-OOM"
    assert read == []  # a wrapper around the classifiers: a named fault costs no model reading
    assert classify(CUDA_OOM).classifier == "learned:cuda_oom" and read == [CUDA_OOM]


def test_a_failure_with_no_named_cause_gets_the_learned_guess(enabled, monkeypatch):
    # "[ERROR]" says that something failed, not what: the catalog's failure-marker verdict is
    # unknown, and the model's reading of the rest of the tail is the better answer.
    text = "[ERROR] the worker stopped\n" + CUDA_OOM
    monkeypatch.setenv(learned_classifier.ENABLE_VAR, "0")
    assert classify(text).classifier == "log_classifier:failure-marker"
    monkeypatch.setenv(learned_classifier.ENABLE_VAR, "1")
    assert classify(text).classifier == "learned:cuda_oom"


def test_the_exit_classifier_outranks_it(enabled):
    assert classify(CUDA_OOM, exit_code=-9).classifier == "exit_classifier"


def test_a_guess_is_retryable_only_without_a_program_error(enabled, monkeypatch):
    # The family's usual flag, unless the tail shows the program failing: a user-code fault the
    # model took for an NCCL error must not burn the restart budget.
    assert learned_classifier.judge(NCCL_TIMEOUT).retryable is True
    for text in (USER_CODE, CUDA_OOM, HOST_OOM):  # families that are not retried anyway
        assert learned_classifier.judge(text).retryable is False
    # Whatever a retrained model makes of each mixed tail, the rule is the same: pin its guess.
    monkeypatch.setattr(learned_classifier.model(), "predict_tokens", lambda features: ("nccl_timeout", 0.99))
    assert learned_classifier.judge(NCCL_TIMEOUT).retryable is True
    for sign in ("Traceback (most recent call last):", "ValueError: bad shape", "train.py: error: bad flag",
                 "Assertion `idx < n` failed.", "Check failed: x == y", "Fatal Python error: Aborted",
                 "python: can't open file '/var/train.py': [Errno 2] No such file or directory"):
        verdict = learned_classifier.judge(f"{sign}\n{NCCL_TIMEOUT}")
        assert verdict is not None and verdict.category.value == "nccl_timeout", sign
        assert verdict.retryable is False, sign


@pytest.mark.parametrize("text", ["", "\n\n   \n"])
def test_blank_text_is_unknown(enabled, text):
    assert learned_classifier.judge(text) is None
    assert classify(text).category.value == "unknown"


def test_benign_looking_text_is_never_benign_but_output_that_stopped(enabled, monkeypatch):
    # The model calls it benign, which needs a pattern's evidence; with none, healthy-looking
    # output under a fault is output that stopped: a stall, retried as the family is.
    model = learned_classifier.model()
    label, probability = model.predict(BENIGN_LOOKING)
    assert label == "success_or_benign" and probability >= model.threshold
    verdict = classify(BENIGN_LOOKING)
    assert (verdict.category.value, verdict.retryable, verdict.node_fault) == ("hang_or_stuck", True, False)
    assert verdict.classifier == "learned:hang_or_stuck" and verdict.fault_code == "TG-STALL"
    # ... unless the text shows a program error: such a stall is not retried as is (the reading
    # pinned, whatever a retrained model makes of the mixed tail)
    monkeypatch.setattr(model, "predict_tokens", lambda features: ("success_or_benign", 0.99))
    verdict = learned_classifier.judge("ValueError: bad shape\n" + BENIGN_LOOKING)
    assert verdict is not None and verdict.category.value == "hang_or_stuck" and verdict.retryable is False


@pytest.mark.parametrize("exit_code", [1, 2])
def test_a_healthy_reading_of_an_exit_is_no_stall(enabled, exit_code):
    # The process ended: its output did not stop, so there is no stall to read (and no cause).
    verdict = classify(BENIGN_LOOKING, exit_code=exit_code)
    assert verdict.category.value == "unknown" and verdict.classifier != "learned:hang_or_stuck"


def test_a_healthy_reading_the_model_is_not_sure_of_stays_unknown(enabled, monkeypatch):
    model = learned_classifier.model()
    monkeypatch.setattr(model, "predict_tokens", lambda features: ("success_or_benign", model.threshold - 0.01))
    assert learned_classifier.judge(BENIGN_LOOKING) is None
    assert classify(BENIGN_LOOKING).category.value == "unknown"


def test_a_binary_file_gets_no_guess(enabled):
    # A core dump or a compressed log passed by mistake: the model would weigh its random letter
    # runs into a confident guess (it did: gpu_hardware, node_or_infra, hang_or_stuck).
    noise = random.Random(13).randbytes(65536).decode("utf-8", errors="replace")
    assert learned_classifier.model().predict(noise)[1] >= learned_classifier.model().threshold
    assert learned_classifier.judge(noise) is None
    assert classify(noise).category.value == "unknown"
    # a progress bar whose block characters were mangled (U+FFFD) and colour codes are still text
    bar = "\x1b[32mTrain:  63%|" + "\ufffd" * 60 + "   | 820/1298\x1b[0m\r\n"
    assert learned_classifier.is_text(bar + CUDA_OOM)
    assert learned_classifier.judge(bar + CUDA_OOM) is not None


def test_two_words_are_not_enough_for_a_guess(enabled):
    # The model is sure of itself on two words, as naive Bayes is: a guess needs more to go on.
    label, probability = learned_classifier.model().predict("shutting down\n")
    assert label == "segfault_or_signal" and probability >= learned_classifier.model().threshold
    assert learned_classifier.judge("shutting down\n") is None
    assert classify("shutting down\n", exit_code=1).fault_code == "TG-UNKNOWN"
    assert learned_classifier.judge("the process received signal and core dumped while shutting down\n") is not None


def test_below_the_threshold_it_says_nothing(enabled, monkeypatch):
    monkeypatch.setattr(learned_classifier.model(), "threshold", 1.01)
    assert learned_classifier.judge(CUDA_OOM) is None


def test_a_clean_exit_stays_benign(enabled):
    assert classify(NCCL_TIMEOUT, exit_code=0).category.value == "success_or_benign"


@pytest.mark.parametrize("switch, verdict", [(None, ("cuda_oom", "learned:cuda_oom")), ("0", ("unknown", "default"))])
def test_cli_names_the_learned_classifier(tmp_path, switch, verdict):
    log = tmp_path / "rank0.log"
    log.write_text(CUDA_OOM)
    env = {key: value for key, value in os.environ.items() if key != learned_classifier.ENABLE_VAR}
    if switch is not None:
        env[learned_classifier.ENABLE_VAR] = switch
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", "classify", str(log), "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert (said["category"], said["classifier"]) == verdict
