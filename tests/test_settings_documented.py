"""Every environment variable platform/settings.py reads is documented in the README's table and
listed in .env.example, so an operator never has to read the code to configure the platform."""

from __future__ import annotations

import re

import pytest

from .helpers import ROOT

SETTINGS_VARIABLES = sorted(set(re.findall(r'env\.\w+\("([A-Z][A-Z0-9_]*)"', (ROOT / "platform" / "settings.py").read_text())))


def test_settings_read_a_plausible_number_of_variables() -> None:
    assert len(SETTINGS_VARIABLES) > 50 and "DATABASE_URL" in SETTINGS_VARIABLES


@pytest.mark.parametrize("variable", SETTINGS_VARIABLES)
def test_each_variable_is_in_the_readme_and_the_env_example(variable: str) -> None:
    readme = (ROOT / "README.md").read_text()
    example_names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M))
    documented = f"`{variable}`" in readme or (variable.startswith("OTEL_") and "`OTEL_*`" in readme)
    assert documented, f"{variable} is not in the README's environment table"
    assert variable in example_names, f"{variable} is not in .env.example"
