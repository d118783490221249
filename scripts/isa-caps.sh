#!/bin/sh
# The instruction-set cap `make test` runs the numerics-sensitive tests under, as ONEDNN_MAX_CPU_ISA:ATEN_CPU_CAPABILITY:
# on a CPU with AMX, AVX512_CORE_BF16 (an AMD EPYC Zen 4's set), so that an AMX machine also runs what the other family
# runs; elsewhere AVX2 (a laptop's set). Each family thus checks the other's path or the one below it; to run both caps
# anywhere: ISA_CAPS="AVX512_CORE_BF16:avx512 AVX2:avx2" make test.
if grep -q amx_bf16 /proc/cpuinfo 2>/dev/null; then echo "AVX512_CORE_BF16:avx512"; else echo "AVX2:avx2"; fi
