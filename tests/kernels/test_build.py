"""Native code is built once per machine: processes that start at once (two ranks, two commands on a fresh machine)
wait for the one building it and load its library, instead of failing on its lock; a library built for another
vector width than this CPU's computes the same. These tests set their own instruction set: an ISA cap changes nothing
in them, so they are not `numerics` tests."""

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


def test_bias_gelu_without_avx512_uses_the_closed_forms(tmp_path):
    """ATEN_CPU_CAPABILITY=avx2 builds the library without AVX-512; its GELU must agree too."""
    script = (
        "import torch, torch.nn.functional as F\n"
        "from vitkit.kernels import cpu_inference\n"
        "assert cpu_inference.load() and torch.backends.cpu.get_cpu_capability() == 'AVX2'\n"
        "torch.manual_seed(0)\n"
        "h, b = torch.randn(7, 37) * 4, torch.randn(37)\n"
        "for a, form in ((False, 'none'), (True, 'tanh')):\n"
        "    want = F.gelu((h + b).double(), approximate=form).float()  # the exact value, rounded once\n"
        "    torch.testing.assert_close(cpu_inference.bias_gelu_(h.clone(), b, a), want, atol=2e-6, rtol=1e-6)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "VITKIT_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    assert len(list((tmp_path / "kernels").glob("cpu_inference-*.so"))) == 1
