"""`pip install .` installs the library with its core dependencies only; figures, trackers, export runtimes and the
hub are extras. The built wheel's metadata says so, and vitkit's commands run with every optional package absent."""

import email
import email.message
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tiny_run import TINY_RUN

ROOT = Path(__file__).resolve().parents[1]
CORE = {"torch", "numpy", "pillow", "safetensors", "tqdm", "pyyaml"}
# the import names of every optional distribution (and of timm and torchvision, never a dependency)
OPTIONAL_MODULES = (
    "matplotlib tensorboard wandb mlflow onnx onnxscript onnxruntime openvino nncf torchao transformers "
    "huggingface_hub pyarrow simplejpeg scipy timm torchvision"
).split()


def _requirement_name(requirement: str) -> str:
    name = requirement.split(";")[0].strip()
    for stop in "<>=!~[ ":
        name = name.split(stop)[0]
    return name.lower().replace("_", "-")


def built_metadata(tmp_path: Path) -> email.message.Message:
    """The METADATA of the wheel pip builds from a copy of the project (no build folder left in the checkout)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so"))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*command, "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("vitkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_requires_the_core_alone_and_offers_the_rest_as_extras(tmp_path):
    metadata = built_metadata(tmp_path)
    requires = metadata.get_all("Requires-Dist")
    core = {_requirement_name(r) for r in requires if "extra ==" not in r}
    assert core == CORE
    extras: dict[str, set[str]] = {}
    for requirement in requires:
        if "extra ==" in requirement:
            extra = requirement.split("extra ==")[1].strip().strip("'\"")
            extras.setdefault(extra, set()).add(_requirement_name(requirement))
    assert set(metadata.get_all("Provides-Extra")) == set(extras)
    assert extras["plots"] == {"matplotlib"}
    assert extras["trackers"] == {"tensorboard", "wandb", "mlflow-skinny"}
    assert {"onnx", "onnxruntime"} <= extras["onnx"] and extras["hub"] == {"huggingface-hub"}
    assert {"huggingface-hub", "transformers"} <= extras["hf"]
    # the README's install line names extras that exist
    (line,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("pip install .")]
    named = re.search(r"\.\[([\w,]+)\]", line)[1].split(",")
    assert named and set(named) <= set(extras), line
    # `make test` installs dev: it holds what every other extra does (docs builds the site, not the tests)
    missing = {name for extra, names in extras.items() if extra not in ("dev", "docs") for name in names} - extras[
        "dev"
    ]
    assert not missing, f"in an extra but not in dev: {missing}"


# every finder of the interpreter made blind to the optional packages: they import as if never installed; then each
# command of argv[2] (a JSON list of argument lists) through vitkit's main, its exit code and output as JSON
BLOCK = """
import contextlib, io, json, sys
BLOCKED = set(sys.argv[1].split(","))
class Without:
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED or not hasattr(self.finder, "find_spec"):
            return None
        return self.finder.find_spec(name, path, target)
sys.meta_path[:] = [Without(finder) for finder in sys.meta_path]
from vitkit.cli import main
results = []
for args in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


def core_only(*commands: list, cwd: Path) -> list[dict]:
    """`vitkit ARGS` for each of `commands`, in one process where no optional package imports, as after
    `pip install .` alone: [{code, out, err}, ...]."""
    argv = json.dumps([[str(a) for a in args] for args in commands])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", BLOCK, ",".join(OPTIONAL_MODULES), argv], capture_output=True, text=True, cwd=cwd,
        env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_with_the_core_alone_train_and_eval_work_and_figures_say_which_extra_draws_them(tmp_path):
    run = tmp_path / "run"
    trained, scored, inspected = core_only(
        ["train", "--out", run, *TINY_RUN, "train.steps=2", "train.eval_every=2", "train.figures=true"],
        ["eval", run, "--split", "test", "--threads", "1"],
        ["inspect", run, "--out", tmp_path / "inspect", "--threads", "1"],
        cwd=tmp_path,
    )
    assert trained["code"] == 0, trained["err"]
    plots = "matplotlib is not installed; pip install 'vitkit[plots]' draws them"
    assert (
        f"vitkit train: warning: loss.png, accuracy.png, lr.png and confusion.png not drawn: {plots}" in trained["err"]
    )
    assert (run / "final").is_dir() and not list(run.glob("*.png"))
    assert scored["code"] == 0, scored["err"]
    assert f"confusion matrix: not written ({run / 'eval' / 'confusion_test.png'}: {plots})" in scored["out"]
    assert inspected["code"] == 2
    assert inspected["err"].splitlines() == [f"vitkit inspect: error: vitkit inspect draws figures: {plots}"]
