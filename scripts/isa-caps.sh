#!/bin/sh
# The instruction-set cap `make test` runs the numerics-sensitive tests under, as ONEDNN_MAX_CPU_ISA:ATEN_CPU_CAPABILITY:
# on a CPU with AMX, AVX512_CORE_BF16 (an AMD EPYC Zen 4's set), so that an AMX machine also runs what the other family
# runs; on a CPU with AVX-512, AVX2 (a laptop's set). Each family thus checks the other's path or the one below it. A
# CPU without AVX-512 already runs AVX2's path, which a cap to AVX2 would only repeat: nothing then. To run both caps
# anywhere: ISA_CAPS="AVX512_CORE_BF16:avx512 AVX2:avx2" make test. CPUINFO names another file to read than /proc/cpuinfo.
info=${CPUINFO:-/proc/cpuinfo}
if grep -q amx_bf16 "$info" 2>/dev/null; then echo "AVX512_CORE_BF16:avx512"
elif grep -q avx512f "$info" 2>/dev/null; then echo "AVX2:avx2"; fi
