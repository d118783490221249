"""torch.compile's disk cache is kept apart per CPU vector width (a graph's C++ is written for one width)."""

import torch

from vitkit.devices import compile_cache_by_isa


def test_the_compile_cache_is_tagged_with_the_cpu_capability_and_a_users_tag_is_kept():
    # torch's own patch(): pytest's monkeypatch restores a config entry by deleting it, which hides it for good
    with torch.compiler.config.patch(cache_key_tag=""):
        compile_cache_by_isa()
        assert torch.compiler.config.cache_key_tag == f"vitkit-{torch.backends.cpu.get_cpu_capability()}"
    with torch.compiler.config.patch(cache_key_tag="mine"):
        compile_cache_by_isa()
        assert torch.compiler.config.cache_key_tag == "mine"
    assert torch.compiler.config.cache_key_tag  # still readable by the tests that run after this one
