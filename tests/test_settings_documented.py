"""Every option is declared once (notifications/options/), and everything else follows from the
declaration: the settings read, the typed config, docs/operations.md's environment table and
.env.example. An operator never has to read the code to configure the platform."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from notifications.channels.registry import CHANNELS
from notifications.conf import get_config
from notifications.options import APP_OPTIONS, APP_OPTIONS_BY_NAME, GUNICORN_OPTIONS, OPTIONS, Option
from notifications.options.reference import (
    DOCS_PATH,
    ENV_EXAMPLE_PATH,
    default_text,
    docs_with_table,
    env_example,
    stale_references,
    write_references,
)

from .helpers import ROOT

BY_VARIABLE = {option.env: option for option in OPTIONS}


def test_the_environment_table_of_docs_operations_is_written_from_the_options() -> None:
    text = (ROOT / DOCS_PATH).read_text()
    assert docs_with_table(text) == text, "docs/operations.md is out of date: run .venv/bin/python manage.py options_reference"


def test_env_example_is_written_from_the_options() -> None:
    assert (ROOT / ENV_EXAMPLE_PATH).read_text() == env_example(), (
        ".env.example is out of date: run .venv/bin/python manage.py options_reference"
    )


@pytest.mark.parametrize("variable", sorted(BY_VARIABLE))
def test_each_variable_is_in_the_operations_docs_and_the_env_example(variable: str) -> None:
    docs = (ROOT / DOCS_PATH).read_text()
    example_names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ENV_EXAMPLE_PATH).read_text(), re.M))
    assert f"| `{variable}` |" in docs, f"{variable} is not in docs/operations.md's environment table"
    assert variable in example_names, f"{variable} is not in .env.example"


def test_the_variables_the_old_table_left_out_are_declared() -> None:
    assert {"MAILGUN_WEBHOOK_SIGNING_KEY", "BROADCAST_BATCH_SIZE", "BROADCAST_STALE_SECONDS"} <= set(BY_VARIABLE)
    assert BY_VARIABLE["BROADCAST_BATCH_SIZE"].maximum == 1000


def test_the_command_finds_a_stale_file_and_writes_it_anew(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / DOCS_PATH, tmp_path / DOCS_PATH)
    (tmp_path / ENV_EXAMPLE_PATH).write_text("DEBUG=true\n")
    assert stale_references(tmp_path) == [ENV_EXAMPLE_PATH]
    assert write_references(tmp_path) == [ENV_EXAMPLE_PATH]
    assert stale_references(tmp_path) == []
    # The checked-in files pass the command's own check.
    call_command("options_reference", "--check")


def test_settings_read_the_environment_only_through_the_options() -> None:
    source = (ROOT / "platform" / "settings.py").read_text()
    assert re.findall(r'env\.\w+\(\s*"[A-Z]', source) == [], "platform/settings.py reads a variable past its declaration"
    assert set(settings.NOTIFICATIONS) == set(APP_OPTIONS_BY_NAME)


def test_gunicorn_reads_exactly_its_declared_variables_with_their_defaults() -> None:
    source = (ROOT / "gunicorn.conf.py").read_text()
    read = dict(re.findall(r'os\.environ\.get\("([A-Z_]+)"\)(?: or 0\) or (\d+))?', source))
    assert set(read) == {option.env for option in GUNICORN_OPTIONS}
    assert read["WEB_THREADS"] == str(BY_VARIABLE["WEB_THREADS"].default)


def test_every_channel_has_its_provider_option() -> None:
    assert {f"{name.upper()}_PROVIDER" for name in CHANNELS} <= set(APP_OPTIONS_BY_NAME)


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.env)
def test_each_default_reads_back_as_itself_from_the_environment(option: Option) -> None:
    assert option.parse(default_text(option)) == option.default


# A valid value other than the default, for the options whose text has a form of its own.
OTHER_VALUES: dict[str, Any] = {
    "RATE_LIMITS": "email=5/s",
    "RETRY_POLICIES": "sms=2:60:3",
    "STATUS_WEBHOOK_RETRY_POLICY": "1:2:3",
    "API_AUTH_FAILURE_RATE": "5/s",
    "DEFAULT_LOCALE": "fr",
    "PUBLIC_BASE_URL": "https://notify.example.com",
    "SMS_FAILOVER_ACCOUNTS": '[{"account_sid": "AC2", "auth_token": "t"}]',
    "EMAIL_FAILOVER_ACCOUNTS": '[{"host": "smtp2.example.com"}]',
}


def _other_value(option: Option) -> Any:
    if option.name in OTHER_VALUES:
        return OTHER_VALUES[option.name]
    if option.kind is bool:
        return not option.default
    if option.kind is tuple:
        return ("hooks.example.com",)
    if option.kind in (int, float):
        return option.default - 1 if option.maximum is not None and option.default + 1 > option.maximum else option.default + 1
    return "https://elsewhere.example.com" if option.default else "changed"


@pytest.mark.parametrize("option", APP_OPTIONS, ids=lambda option: option.name)
def test_every_app_option_reaches_the_config(option: Option) -> None:
    default = get_config()
    with override_settings(NOTIFICATIONS={option.name: _other_value(option)}):
        assert get_config() != default, f"{option.env} changes nothing in conf.get_config()"


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("BROADCAST_BATCH_SIZE", "5000", "BROADCAST_BATCH_SIZE must be at most 1000, got 5000"),
        ("RETENTION_DAYS", "0", "RETENTION_DAYS must be at least 1, got 0"),
        ("RETRY_MAX_ATTEMPTS", "lots", "RETRY_MAX_ATTEMPTS: 'lots' is not a whole number"),
        ("RETRY_MAX_ATTEMPTS", "2.5", "RETRY_MAX_ATTEMPTS: '2.5' is not a whole number"),
        ("RETRY_BASE_SECONDS", "nan", "RETRY_BASE_SECONDS: 'nan' is not a finite number"),
        ("EVENTS_QUORUM_QUEUES", "maybe", "EVENTS_QUORUM_QUEUES: 'maybe' is not true or false"),
        ("API_AUTH_FAILURE_RATE", "lots/min", "API_AUTH_FAILURE_RATE: 'lots/min' is not of the form N/s, N/min"),
        ("EMAIL_PORT", "0", "EMAIL_PORT must be at least 1, got 0"),
        ("LOG_FORMAT", "xml", "LOG_FORMAT: 'xml' is not of the form json or text"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(variable: str, value: str, said: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        BY_VARIABLE[variable].parse(value)
    assert str(refused.value).startswith(said)


def test_unset_is_the_default_and_empty_text_is_empty_never_a_number_or_a_truth() -> None:
    assert BY_VARIABLE["RETENTION_DAYS"].parse(None) == 30 and BY_VARIABLE["DEBUG"].parse(None) is True
    # An empty rate-limit list is no limit at all; an empty list of hosts is none.
    assert BY_VARIABLE["NOTIFICATIONS_RATE_LIMITS"].parse("") == ""
    assert BY_VARIABLE["WEBHOOK_ALLOW_HOSTS"].parse("") == ()
    assert BY_VARIABLE["WEBHOOK_ALLOW_HOSTS"].parse("a.example, ,b.example") == ("a.example", "b.example")
    for variable in ("DEBUG", "RETENTION_DAYS", "RETRY_BASE_SECONDS"):
        with pytest.raises(ImproperlyConfigured, match=f"^{variable}: '' is not"):
            BY_VARIABLE[variable].parse("")
