"""Policy: AIMaster names and defaults from every source, and clear errors for bad values."""

from __future__ import annotations

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
