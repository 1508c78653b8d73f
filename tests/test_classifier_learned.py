"""The learned fallback classifier (trainguard/plugins/learned_classifier.py, issue 13 item 4).

The excerpts here are synthetic, written for these tests (no corpus text). The fallback is off
by default (it did not beat the patterns alone on the untouched holdout files), so the tests
that need it turn it on with TRAINGUARD_LEARNED_FALLBACK=1.
"""

from __future__ import annotations

import json
import os
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


def test_registered_and_off_by_default(monkeypatch):
    assert "learned_classifier" in HOST.plugin_names
    monkeypatch.delenv(learned_classifier.ENABLE_VAR, raising=False)
    assert learned_classifier.enabled() is learned_classifier.ENABLED_BY_DEFAULT
    if not learned_classifier.ENABLED_BY_DEFAULT:
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
    assert verdict.confidence < min(p.confidence for p in patterns)
    assert verdict.evidence and verdict.evidence in text
    assert verdict.retryable is learned_classifier.FAMILY[label][1]


def test_a_pattern_match_keeps_the_pattern_verdict(enabled):
    text = CUDA_OOM + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    verdict = classify(text)
    assert verdict.classifier.startswith("log_classifier:")
    assert verdict.fault_code == "TG-CUDA-OOM"


def test_the_exit_classifier_outranks_it(enabled):
    assert classify(CUDA_OOM, exit_code=-9).classifier == "exit_classifier"


def test_user_code_is_never_retryable(enabled, monkeypatch):
    assert classify(USER_CODE).retryable is False
    monkeypatch.setitem(learned_classifier.FAMILY, "user_code", ("TG-USER-EXCEPTION", True, False, True))
    verdict = learned_classifier.judge(USER_CODE)
    assert verdict is not None and verdict.category.value == "user_code" and verdict.retryable is False


@pytest.mark.parametrize("text", ["", "\n\n   \n", BENIGN_LOOKING])
def test_blank_or_benign_looking_text_is_unknown_not_benign(enabled, text):
    if text == BENIGN_LOOKING:  # the model would call it benign: that needs a pattern's evidence
        assert learned_classifier.model().predict(text)[0] == "success_or_benign"
    assert learned_classifier.judge(text) is None
    assert classify(text).category.value == "unknown"


def test_below_the_threshold_it_says_nothing(enabled, monkeypatch):
    monkeypatch.setattr(learned_classifier.model(), "threshold", 1.01)
    assert learned_classifier.judge(CUDA_OOM) is None


def test_a_clean_exit_stays_benign(enabled):
    assert classify(NCCL_TIMEOUT, exit_code=0).category.value == "success_or_benign"


def test_it_is_fast_on_a_long_tail(enabled):
    tail = "".join(f"step {i} loss {1.0 / (i + 1):.5f} lr 0.0003 tokens/s 81234\n" for i in range(2000))[-65536:]
    learned_classifier.judge(tail)
    started = time.perf_counter()
    for _ in range(10):
        learned_classifier.judge(tail + CUDA_OOM)
    assert (time.perf_counter() - started) / 10 < 0.005


def test_cli_names_the_learned_classifier(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(CUDA_OOM)
    env = {**os.environ, learned_classifier.ENABLE_VAR: "1"}
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", "classify", str(log), "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert (verdict["category"], verdict["classifier"]) == ("cuda_oom", "learned:cuda_oom")
