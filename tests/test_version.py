"""The version lives in one place, vitkit.__version__: the package metadata and `vitkit --version` say the same."""

import re
from importlib.metadata import version
from pathlib import Path

import vitkit


def test_the_version_is_written_once_and_reported_everywhere(run_cli):
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"vitkit {vitkit.__version__}"
    assert version("vitkit") == vitkit.__version__
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    project = pyproject.split("\n[project]\n", 1)[1].split("\n[", 1)[0]  # the [project] table alone
    assert 'dynamic = ["version"]' in project and not re.search(r"^version\s*=", project, flags=re.M)
    changelog = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    assert f"## [{vitkit.__version__}]" in changelog
