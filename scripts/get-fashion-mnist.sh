#!/usr/bin/env sh
# Make Fashion-MNIST available: Debian's package dataset-fashion-mnist installs its IDX files under
# /usr/share/datasets/fashion-mnist. Never fails: without it, the demo says where to put the files
# and the tests that need it are skipped.
dir="${VITKIT_DATA:-/usr/share/datasets/fashion-mnist}"
if [ -f "$dir/train-images-idx3-ubyte.gz" ] || [ -f "$dir/train-images-idx3-ubyte" ]; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing Fashion-MNIST (apt-get install dataset-fashion-mnist)"
    apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } \
        || echo "warning: apt-get could not install dataset-fashion-mnist"
fi
if [ ! -d "$dir" ]; then
    echo "Fashion-MNIST not found: put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,"
    echo "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz in $dir (or set VITKIT_DATA)."
fi
exit 0
