import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import settings

# one share of the cores per pytest-xdist worker: two workers of two threads each on two cores wait on each other's
# spinning threads (the oversubscription `train.threads` avoids for a user)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))
# torch.compile's on-disk cache (shared under /tmp) keys a graph without the vector ISA its C++ was generated for: code
# written for AVX2's 8-float vectors (`make test`'s ATEN_CPU_CAPABILITY=avx2 pass) is rebuilt with AVX-512's 16 by a later
# uncapped run, and its full-vector stores then write past inductor's buffers (heap corruption). One tag per ISA.
os.environ["TORCH_COMPILE_CACHE_KEY_TAG"] = f"vitkit-{torch.backends.cpu.get_cpu_capability()}"
torch.compiler.config.cache_key_tag = os.environ["TORCH_COMPILE_CACHE_KEY_TAG"]
# compiled kernels go to a fresh directory per session (CLI subprocesses inherit it), not to ~/.cache; pytest-xdist's
# workers of one run share it, so each kernel is built once per run, and `make test`'s passes share one (VITKIT_TEST_RUN):
# a kernel's name holds its build flags, so a capped pass builds only what its cap changes
_RUN = os.environ.get("VITKIT_TEST_RUN") or os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    os.environ["VITKIT_CACHE"] = os.path.join(tempfile.gettempdir(), f"vitkit-cache-{_RUN}")
    os.makedirs(os.environ["VITKIT_CACHE"], exist_ok=True)
else:
    os.environ["VITKIT_CACHE"] = tempfile.mkdtemp(prefix="vitkit-cache-")
# nothing downloads in tests: a hub name reads huggingface_hub's cache only (tests that build one set HF_HUB_CACHE)
os.environ["HF_HUB_OFFLINE"] = "1"

# Hypothesis profiles. ci (chosen where CI is set): the same examples every run and no example database, so a run
# passes or fails by the code alone. dev (elsewhere): a fresh random search each run, replaying what failed before.
# fuzz: the long search a person starts by hand (CONTRIBUTING.md), VITKIT_FUZZ_EXAMPLES where the others have 100.
# Each property test asks for a multiple of the profile's max_examples, so a profile scales them all.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev")
FUZZ_EXAMPLES = int(os.environ.get("VITKIT_FUZZ_EXAMPLES", "2000"))
settings.register_profile("fuzz", max_examples=FUZZ_EXAMPLES, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


ISA_CAP = os.environ.get("ONEDNN_MAX_CPU_ISA", "")  # `make test` runs the numerics-sensitive tests again under a cap


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu need a CUDA device: skipped, with the reason, on machines without one (CI)."""
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (none visible)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    _skip_what_the_cpu_cannot_do(items)
    for item in items:  # the networks' math computes floats; their configs and sizes (integers) do not
        if item.path.parent == MODEL_TESTS and item.path.name not in ("test_config.py", "test_registry.py"):
            item.add_marker(pytest.mark.numerics)


MODEL_TESTS = Path(__file__).parent / "models"


def _skip_what_the_cpu_cannot_do(items):
    """Tests of what this CPU cannot do, as it is or under an instruction-set cap, are skipped with the reason: int8
    needs VNNI (vitkit refuses int8 without it; see precision.int8_vnni), and OpenVINO plans its precision by the CPU's
    own flags (a cap makes it ask oneDNN for kernels that the cap took away)."""
    from vitkit.inference import precision

    no_vnni = precision.int8_vnni() is None
    lacks = f"which ONEDNN_MAX_CPU_ISA={ISA_CAP} takes away" if ISA_CAP else "which this CPU lacks"
    for item in items:
        if ISA_CAP and ("openvino" in item.keywords or "openvino" in item.name):
            item.add_marker(pytest.mark.skip(reason=f"OpenVINO ignores ONEDNN_MAX_CPU_ISA={ISA_CAP} when it plans"))
        elif no_vnni and ("int8" in item.keywords or "int8" in item.name):
            item.add_marker(pytest.mark.skip(reason=f"int8 needs VNNI, {lacks}"))


@pytest.fixture
def tiny_run() -> list[str]:
    """The overrides of the suite's tiny training run (tests/tiny_run.py), a copy to extend."""
    from tiny_run import TINY_RUN

    return list(TINY_RUN)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def bf16_kernel():
    """vitkit's bf16 attention kernel, built by the first test that asks (at collection every pytest-xdist worker would
    wait on the compiler); skips where the CPU has no AVX512_BF16 or the kernel does not build."""
    from vitkit.kernels import cpu_inference

    if not cpu_inference.load_bf16():
        pytest.skip("the CPU has no AVX512_BF16 (or the bf16 kernel did not build)")
    return cpu_inference


@pytest.fixture
def kernel_spy():
    """vitkit's CPU inference kernels behind a recorder: (kernels to hand a model, the names of the kernels called)."""
    from vitkit.kernels import cpu_inference

    calls: list[str] = []

    def spy(name):
        def call(*args):
            calls.append(name)
            return getattr(cpu_inference, name)(*args)

        return call

    return SimpleNamespace(attention=spy("attention"), bias_gelu_=spy("bias_gelu_")), calls


def _vitkit_command() -> list[str]:
    """The real console script installed beside this interpreter (fallback: python -m vitkit)."""
    script = Path(sys.executable).with_name("vitkit")
    if script.exists():
        return [str(script)]
    found = shutil.which("vitkit")
    return [found] if found else [sys.executable, "-m", "vitkit"]


@pytest.fixture(scope="session")  # stateless: module-scoped fixtures (a trained run) use it too
def run_cli():
    """Run `vitkit ARGS...` as a user would; returns the CompletedProcess (text, never raises)."""

    def run(*args: str, cwd=None, timeout: float = 300, env=None, preexec_fn=None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*_vitkit_command(), *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            preexec_fn=preexec_fn,  # e.g. a memory limit (resource.setrlimit) for the child alone
        )

    return run


@pytest.fixture
def vitkit_cmd(capsys):
    """`vitkit ARGS...` in this process: the console script's own main(), without a new interpreter (and a new
    import of torch) each time. Same result shape as run_cli; the working directory and torch's thread count
    (which --threads sets for the whole process) are put back. Keep run_cli where the process itself is tested."""
    from vitkit.cli import main

    def run(*args, cwd=None) -> subprocess.CompletedProcess:
        before, threads = os.getcwd(), torch.get_num_threads()
        os.chdir(cwd or before)
        try:
            code = main([str(a) for a in args])
        except SystemExit as stop:  # argparse's own errors
            code = stop.code if isinstance(stop.code, int) else 2
        finally:
            os.chdir(before)
            torch.set_num_threads(threads)
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(["vitkit", *map(str, args)], code, captured.out, captured.err)

    return run


@pytest.fixture
def under_memory_limit():
    """Run `fn()` in a forked child whose address space may grow by at most `mb` MiB (RLIMIT_AS); returns
    ("ok", None), ("error", ExceptionType name + message) or ("killed"/"memory", ...) - never raises itself."""
    import pickle
    import resource
    import traceback

    def run(fn, mb: int = 256):
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            os.close(read)
            try:
                pages = int(open("/proc/self/statm").read().split()[0])
                resource.setrlimit(
                    resource.RLIMIT_AS, (pages * os.sysconf("SC_PAGE_SIZE") + (mb << 20), resource.RLIM_INFINITY)
                )
                fn()
                result = ("ok", None)
            except MemoryError:
                result = ("memory", traceback.format_exc(limit=3))
            except BaseException as err:
                result = ("error", f"{type(err).__name__}: {err}")
            os.write(write, pickle.dumps(result))
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(child, 0)
        return pickle.loads(data) if data else ("killed", status)

    return run
