#!/bin/sh
# The instruction-set caps `make test` runs the numerics-sensitive tests under, as ONEDNN_MAX_CPU_ISA:ATEN_CPU_CAPABILITY
# pairs: AVX2 everywhere; on a CPU with AMX also AVX512_CORE_BF16 (an AMD EPYC Zen 4's set), so that an AMX machine
# also runs what the other family runs.
caps="AVX2:avx2"
grep -q amx_bf16 /proc/cpuinfo 2>/dev/null && caps="AVX512_CORE_BF16:avx512 $caps"
echo "$caps"
