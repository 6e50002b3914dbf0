"""The documentation stays true: the README's commands are the ones CI and the CLI run."""

from __future__ import annotations

import re

from .conftest import REPO


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    return [line for block in blocks[:2] for line in block.strip().splitlines()]


def test_quickstart_has_the_two_commands():
    main_job, tests = readme_commands()
    assert main_job.startswith("python3 -m venv") and main_job.endswith("plga verify")
    assert tests.startswith("python3 -m venv") and "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command():
    test_command = readme_commands()[1].split("&& ")[-1]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_command in ci, f"{test_command!r} must be a line of .ci/run"
    assert any("exit 1" in line for line in ci) and "-eq 5" in "".join(ci), "CI must fail on pytest exit 5"


def test_readme_formalized_table_is_generated_from_the_catalog():
    from plga.proofs_bridge import render_formalized_table

    text = (REPO / "README.md").read_text()
    start = text.index("<!-- BEGIN formalized")
    start = text.index("\n", start) + 1
    end = text.index("<!-- END formalized -->")
    assert text[start:end].strip() == render_formalized_table().strip(), "run `plga theorems --readme-table`"
