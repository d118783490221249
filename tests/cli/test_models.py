import json

from vitkit.models import MODELS


def test_models_lists_every_variant_with_parameters_and_gflops(vitkit_cmd):
    result = vitkit_cmd("models")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["name", "layers"] and "params" in lines[0] and "gflops" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == set(MODELS)
    assert rows["vit_b16"][-2] == "86,567,656" and float(rows["vit_b16"][-1]) == 35.13


def test_models_json_and_overrides(vitkit_cmd):
    result = vitkit_cmd("models", "ViT-L/16", "--image-size", "384", "--num-classes", "10", "--json")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)
    assert row["name"] == "ViT-L/16" and row["resolution"] == 384 and row["layers"] == 24
    assert row["gflops"] > 3 * 123  # (384/224)^2 more tokens, attention grows faster


def test_unknown_model_is_one_line_and_exit_code_2(run_cli):
    result = run_cli("models", "vit_q16")  # the console script
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "unknown model 'vit_q16'" in result.stderr
    assert "Traceback" not in result.stderr


def test_python_dash_m_entry_point_and_version(run_cli):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "vitkit", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("vitkit ")
