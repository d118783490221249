"""Native code is built once per machine: processes that start at once (two ranks, two commands on a fresh machine)
wait for the one building it and load its library, instead of failing on its lock."""

import os
import subprocess
import sys

BUILD = """
import sys
from pathlib import Path
from vitkit.kernels import build_library
print(build_library(Path(sys.argv[1]), "cc", ["-shared", "-fPIC", "-O1"], [], key=["race"]))
"""


def test_processes_building_one_library_at_once_all_get_it(tmp_path):
    source = tmp_path / "one.c"
    source.write_text(
        "int one(void) { return 1; }\n" * 1 + "".join(f"int f{i}(int x) {{ return x * {i}; }}\n" for i in range(2000))
    )
    env = {**os.environ, "VITKIT_CACHE": str(tmp_path / "cache")}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD, str(source)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [run.communicate(timeout=120) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outs]
    libraries = {out.strip() for out, _ in outs}
    assert len(libraries) == 1 and os.path.getsize(libraries.pop()) > 0
    assert not [p for p in (tmp_path / "cache" / "kernels").iterdir() if ".tmp" in p.name]
