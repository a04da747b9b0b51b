"""The settings pattern: typed parsing from CLEARANCE_* variables, errors, --help."""

from __future__ import annotations

import dataclasses
import io
from dataclasses import field
from pathlib import Path

import pytest

from clearance.entrypoint import load_settings
from clearance.settings import (
    CommonSettings,
    Seconds,
    SettingsError,
    doc,
    format_duration,
    parse_duration,
    render_help,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrackerSettings(CommonSettings):
    """A service's settings extend the common ones."""

    stuck_alert_after: Seconds = field(default=60.0, metadata=doc("Alert after this long."))
    force_delete: bool = field(default=True, metadata=doc("Force-delete stuck pods."))
    max_parallel: int = field(default=4, metadata=doc("Deletes in flight."))
    ratio: float = field(default=0.5, metadata=doc("A ratio."))
    extra_labels: tuple[str, ...] = field(default=("a", "b"), metadata=doc("Labels."))
    report: Path | None = field(
        default=None, metadata=doc("Where to write a report.", env="TRACKER_REPORT")
    )


def test_defaults_follow_the_design() -> None:
    s = CommonSettings.from_env({})
    assert s.nats_url == "nats://127.0.0.1:4222"
    assert s.namespaces == ()
    assert (s.appwrapper_group, s.appwrapper_version) == ("workload.codeflare.dev", "v1beta1")
    assert s.log_level == "INFO"
    assert s.nats_creds is None and s.nats_tls_ca is None


def test_values_are_parsed_by_type() -> None:
    s = TrackerSettings.from_env(
        {
            "CLEARANCE_NATS_URL": "nats://a:4222, nats://b:4222",
            "CLEARANCE_HTTP_PORT": "9090",
            "CLEARANCE_NAMESPACES": "team-a, team-b,,",
            "CLEARANCE_LOG_LEVEL": "debug",
            "CLEARANCE_STUCK_ALERT_AFTER": "1m30s",
            "CLEARANCE_FORCE_DELETE": "no",
            "CLEARANCE_MAX_PARALLEL": "8",
            "CLEARANCE_RATIO": "0.25",
            "CLEARANCE_EXTRA_LABELS": "",
            "CLEARANCE_NATS_CREDS": "/etc/nats/svc.creds",
            "TRACKER_REPORT": "/tmp/r.json",
            "UNRELATED": "x",
        }
    )
    assert s.nats_servers == ["nats://a:4222", "nats://b:4222"]
    assert s.http_port == 9090
    assert s.namespaces == ("team-a", "team-b")
    assert s.log_level == "DEBUG"
    assert s.stuck_alert_after == 90.0
    assert s.force_delete is False
    assert (s.max_parallel, s.ratio, s.extra_labels) == (8, 0.25, ())
    assert s.nats_creds == Path("/etc/nats/svc.creds")
    assert s.report == Path("/tmp/r.json")


def test_settings_are_frozen() -> None:
    s = CommonSettings.from_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.http_port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2),
        ("5m", 300),
        ("1h", 3600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("2.5s", 2.5),
        ("7", 7),
        ("0", 0),
    ],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m5", "-1s", "1s2", "inf", "nan"])
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("seconds", [0.5, 2, 90, 3600, 86400 + 61, 2.5])
def test_formatted_durations_parse_back(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_every_bad_variable_is_named_in_one_error() -> None:
    with pytest.raises(SettingsError) as err:
        TrackerSettings.from_env(
            {
                "CLEARANCE_HTTP_PORT": "eighty",
                "CLEARANCE_STUCK_ALERT_AFTER": "soon",
                "CLEARANCE_FORCE_DELETE": "maybe",
                "CLEARANCE_LOG_LEVEL": "chatty",
                "CLEARANCE_RATIO": "nan",
            }
        )
    problems = err.value.problems
    assert len(problems) == 5
    text = str(err.value)
    for var in ("HTTP_PORT", "STUCK_ALERT_AFTER", "FORCE_DELETE", "LOG_LEVEL", "RATIO"):
        assert f"CLEARANCE_{var}=" in text
    assert "'eighty'" in text and "DEBUG, INFO, WARNING, ERROR" in text


def test_range_checks_name_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"CLEARANCE_HTTP_PORT='70000'.*0\.\.65535"):
        CommonSettings.from_env({"CLEARANCE_HTTP_PORT": "70000"})
    with pytest.raises(SettingsError, match="CLEARANCE_NATS_RECONNECT_WAIT"):
        CommonSettings.from_env({"CLEARANCE_NATS_RECONNECT_WAIT": "0s"})


def test_secrets_never_appear_in_errors_or_repr() -> None:
    s = CommonSettings.from_env({"CLEARANCE_NATS_USER": "u", "CLEARANCE_NATS_PASSWORD": "hunter2"})
    assert s.nats_password == "hunter2"
    assert "hunter2" not in repr(s)


def test_settings_that_only_work_together_are_checked_together() -> None:
    with pytest.raises(SettingsError, match="CLEARANCE_NATS_TLS_CERT and CLEARANCE_NATS_TLS_KEY"):
        CommonSettings.from_env({"CLEARANCE_NATS_TLS_CERT": "/c.pem"})
    with pytest.raises(SettingsError, match="CLEARANCE_NATS_USER and CLEARANCE_NATS_PASSWORD"):
        CommonSettings.from_env({"CLEARANCE_NATS_USER": "u"})


def test_an_empty_optional_variable_means_unset() -> None:
    assert CommonSettings.from_env({"CLEARANCE_NATS_CREDS": ""}).nats_creds is None


def test_help_lists_every_setting_with_variable_type_default_and_doc() -> None:
    text = render_help(TrackerSettings)
    for f in dataclasses.fields(TrackerSettings):
        assert TrackerSettings.env_name(f.name) in text
        assert f.metadata["help"] in text
    assert "CLEARANCE_STUCK_ALERT_AFTER  [duration, default: 1m]" in text
    assert "CLEARANCE_NATS_URL  [string, default: nats://127.0.0.1:4222]" in text
    assert "CLEARANCE_NAMESPACES  [comma-separated strings, default: (empty)]" in text
    assert "CLEARANCE_LOG_LEVEL  [DEBUG|INFO|WARNING|ERROR, default: INFO]" in text
    assert "TRACKER_REPORT  [path, optional, default: unset]" in text
    assert TrackerSettings.render_help() == text


def test_entry_point_help_lists_settings_and_exits_zero() -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        load_settings(TrackerSettings, ["--help"], prog="clearance-tracker", out=out)
    assert exit_.value.code == 0
    text = out.getvalue()
    assert text.startswith("usage: clearance-tracker")
    assert "CLEARANCE_STUCK_ALERT_AFTER" in text and "OTEL_EXPORTER_OTLP_ENDPOINT" in text


def test_entry_point_reports_bad_values_without_a_traceback() -> None:
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        load_settings(
            TrackerSettings,
            [],
            prog="clearance-tracker",
            environ={"CLEARANCE_HTTP_PORT": "x"},
            err=err,
        )
    assert exit_.value.code == 2
    assert "CLEARANCE_HTTP_PORT='x': expected an integer" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_entry_point_rejects_arguments() -> None:
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        load_settings(TrackerSettings, ["--port", "1"], prog="clearance-tracker", err=err)
    assert exit_.value.code == 2
    assert "environment variables" in err.getvalue()


def test_entry_point_returns_the_settings() -> None:
    s = load_settings(TrackerSettings, [], prog="t", environ={"CLEARANCE_MAX_PARALLEL": "2"})
    assert s.max_parallel == 2
