"""Policy: AIMaster names and defaults from every source, and clear errors for bad values."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainguard.errors import PolicyError
from trainguard.model import ExecutionMode, FaultTolerantPolicy
from trainguard.policy import Policy, build_policy, from_annotations, load_policy_file, parse_aimaster_args


def test_defaults_are_aimasters():
    p = Policy()
    assert p.job_execution_mode is ExecutionMode.SYNC
    assert p.enable_job_restart is False and p.max_num_of_job_restart == 3
    assert p.enable_job_hang_detection is False and p.job_hang_interval == 1800
    assert p.enable_job_exit_hang_detection is False and p.job_exit_hang_interval == 600
    assert p.fault_tolerant_policy is FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG
    assert p.max_num_of_same_error == 10 and p.max_tolerated_failure_rate == -1


def test_aimaster_string_is_accepted_verbatim():
    text = ("--job-execution-mode=Sync --enable-job-restart=True --enable-job-hang-detection=True "
            "--job-hang-interval=3600 --max-num-of-job-restart 5 --fault-tolerant-policy=OnFailure "
            "--retryable-error='connect timeout' --retryable-error=error_yyy")
    p = build_policy(parse_aimaster_args(text))
    assert p.enable_job_restart and p.enable_job_hang_detection and p.job_hang_interval == 3600
    assert p.max_num_of_job_restart == 5 and p.fault_tolerant_policy is FaultTolerantPolicy.ON_FAILURE
    assert p.retryable_errors == ("connect timeout", "error_yyy")


@pytest.mark.parametrize("text,attr,value", [
    ("async", "job_execution_mode", ExecutionMode.ASYNC),
    ("ASYNC", "job_execution_mode", ExecutionMode.ASYNC),
    ("exitcodeanderrormsg", "fault_tolerant_policy", FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG),
    ("NEVER", "fault_tolerant_policy", FaultTolerantPolicy.NEVER),
    ("TRUE", "enable_job_restart", True),
    ("false", "enable_job_restart", False),
])
def test_values_are_case_insensitive(text, attr, value):
    assert getattr(build_policy({attr: text}), attr) == value


@pytest.mark.parametrize("name,value,message", [
    ("--job-execution-mode", "Parallel", "--job-execution-mode: 'Parallel' is not one of Sync, Async"),
    ("--enable-job-restart", "maybe", "--enable-job-restart: 'maybe' is not True or False"),
    ("--job-hang-interval", "0", "--job-hang-interval: '0' must be positive"),
    ("--job-hang-interval", "soon", "--job-hang-interval: 'soon' is not a positive number"),
    ("--max-num-of-job-restart", "-1", "--max-num-of-job-restart: '-1' must be 0 or more"),
    ("--max-tolerated-failure-rate", "1.5", "must be -1 (off) or a share in (0, 1]"),
    ("--retryable-error", "", "an empty keyword would match every log"),
    ("--job-hang-intervall", "5", "--job-hang-intervall: unknown parameter"),
])
def test_bad_values_name_the_parameter(name, value, message):
    with pytest.raises(PolicyError) as err:
        build_policy({name: value})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_layers_later_win_and_keywords_accumulate(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("job_hang_interval: 100\nenable-job-restart: true\nretryable_errors: [alpha]\n")
    p = build_policy(load_policy_file(path), {"--job-hang-interval": "50", "retryable_errors": ["beta"]})
    assert p.job_hang_interval == 50 and p.enable_job_restart
    assert p.retryable_errors == ("alpha", "beta")


@pytest.mark.parametrize("content,message", [
    ("- a\n- b\n", "must hold a mapping"),
    ("a: [\n", "is not valid YAML"),
])
def test_bad_policy_files(tmp_path, content, message):
    path = tmp_path / "p.yaml"
    path.write_text(content)
    with pytest.raises(PolicyError, match=message):
        load_policy_file(path)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy_file(tmp_path / "missing.yaml")


def test_seed_002_annotations():
    p = from_annotations({
        "fault-tolerance/job-retry-num": "8",
        "fault-tolerance/job-unconditional-retry": "true",
        "fault-tolerance/hang-retry": "true",
        "fault-tolerance/pod-retry-num": "3",
        "trainguard/job-hang-interval": "450",
        "unrelated/annotation": "x",
    })
    assert p.enable_job_restart and p.max_num_of_job_restart == 8
    assert p.fault_tolerant_policy is FaultTolerantPolicy.ON_FAILURE
    assert p.enable_job_hang_detection and p.job_hang_interval == 450 and p.max_num_of_pod_restart == 3
    assert from_annotations({}) == Policy()
    with pytest.raises(PolicyError, match="1-128"):
        from_annotations({"fault-tolerance/job-retry-num": "500"})


def test_json_round_trip():
    p = build_policy({"job_execution_mode": "Async", "retryable_errors": ["x"], "job_hang_interval": 7})
    assert Policy.from_json(p.to_json()) == p


def test_c4d_parameters_are_accepted_for_compatibility(caplog):
    p = build_policy(parse_aimaster_args("--enable-job-hang-detection=True --enable-c4d-hang-detection=True "
                                         "--c4d-log-level=info --c4d-common-envs=C4D_HANG_TIMEOUT=1,C4D_HANG_TIMES=2"))
    assert p.enable_c4d_hang_detection and p.c4d_log_level == "Info"
    assert p.c4d_common_envs == "C4D_HANG_TIMEOUT=1,C4D_HANG_TIMES=2"
    with pytest.raises(PolicyError, match="--c4d-log-level: 'loud' is not one of Info, Warning, Error"):
        build_policy({"c4d_log_level": "loud"})


def test_aimaster_string_errors():
    with pytest.raises(PolicyError, match="expected --name=value"):
        parse_aimaster_args("job-hang-interval=5")
    with pytest.raises(PolicyError, match="needs a value"):
        parse_aimaster_args("--enable-job-restart")
    with pytest.raises(PolicyError, match="cannot split"):
        parse_aimaster_args("--retryable-error='open")


@pytest.mark.parametrize("name,value,message", [
    ("--stop-grace-period", "nan", "--stop-grace-period: 'nan' is not a finite number"),
    ("--job-hang-interval", "inf", "--job-hang-interval: 'inf' is not a finite number"),
    ("--job-exit-hang-interval", "-inf", "is not a finite number"),
    ("--max-tolerated-failure-rate", "nan", "is not a finite number"),
    ("--job-hang-interval", "1e300", "is more than 2592000"),
    ("--stop-grace-period", "86401", "is more than 86400"),
    ("--log-tail-bytes", "99999999999999999999", "is more than 67108864"),
    ("--max-num-of-job-restart", "10000000", "is more than 1000000"),
    ("--max-num-of-same-error", 2.5, "is not a positive number"),
    ("--enable-job-restart", ["x"], "is not True or False"),
    ("--c4d-common-envs", {"a": 1}, "is not a string"),
    ("--retryable-error", [["nested"]], "is not a string"),
    ("--job-hang-interval", True, "is not a positive number"),
])
def test_numbers_are_finite_in_range_and_typed(name, value, message):
    with pytest.raises(PolicyError) as err:
        build_policy({name: value})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_whole_floats_from_yaml_are_whole_numbers():
    assert build_policy({"max_num_of_job_restart": 5.0}).max_num_of_job_restart == 5


@pytest.mark.parametrize("content,message", [
    (b"1: 2\n", "key 1 is not a parameter name"),
    (b"job_hang_interval: \xff\xfe\n", "is not UTF-8"),
    (b"[" * 50000 + b"]" * 50000, "nested too deeply"),
    (b"retryable_errors: [[[[x]]]]\n", "nested too deeply"),
    (b"job_hang_interval: 1\n" + b"# padding\n" * 110000, "is larger than 1048576 bytes"),
])
def test_policy_files_are_checked_before_they_are_trusted(tmp_path, content, message):
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    with pytest.raises(PolicyError, match="--policy") as err:
        load_policy_file(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_policy_files_must_be_regular_files(tmp_path):
    with pytest.raises(PolicyError, match="/dev/zero is not a regular file"):
        load_policy_file("/dev/zero")
    with pytest.raises(PolicyError, match="is a directory"):
        load_policy_file(tmp_path)


def test_json_policy_files(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"job_hang_interval": 60, "retryable_errors": ["x"]}')
    assert build_policy(load_policy_file(path)).job_hang_interval == 60
    path.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(PolicyError, match="nested too deeply|must hold a mapping"):
        load_policy_file(path)


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainguard", *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, env={**os.environ, "TRAINGUARD_STATE_DIR": str(tmp_path / "state")})


def _policy_file(tmp_path, content: bytes) -> str:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("make_args,expected", [
    (lambda t: ["--policy", _policy_file(t, b"1: 2\n")], ["--policy", "key 1"]),
    (lambda t: ["--policy", _policy_file(t, b"job_hang_interval: \xff\n")], ["--policy", "not UTF-8"]),
    (lambda t: ["--policy", _policy_file(t, b"[" * 50000 + b"]" * 50000)], ["--policy", "nested too deeply"]),
    (lambda t: ["--policy", "/dev/zero"], ["--policy", "/dev/zero is not a regular file"]),
    (lambda t: ["--policy", str(t)], ["--policy", "is a directory"]),
    (lambda t: ["--stop-grace-period", "nan"], ["--stop-grace-period", "'nan'"]),
    (lambda t: ["--job-hang-interval", "inf"], ["--job-hang-interval", "'inf'"]),
    (lambda t: ["--aimaster-args", "--job-hang-interval=nan"], ["--job-hang-interval", "'nan'"]),
])
def test_bad_run_options_are_one_line_and_exit_2(tmp_path, make_args, expected):
    done = _cli(tmp_path, "run", *make_args(tmp_path), "--", "true")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(word in done.stderr for word in expected), done.stderr


def test_a_huge_tail_bytes_on_classify_is_one_line(tmp_path):
    log = tmp_path / "rank.log"
    log.write_text("RuntimeError: boom\n")
    done = _cli(tmp_path, "classify", str(log), "--tail-bytes", "99999999999999999999")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--tail-bytes: 99999999999999999999 is more than 67108864" in done.stderr
