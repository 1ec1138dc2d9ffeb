#!/bin/bash
# Device run 1, 2026-11-26: the CPU benchmarks of issues 3, 7 and 5 on the GPU machine's 16 cores.
# Run from the repository root with OUT set, the pack (tools/gpu-check --pack .gpu, plus
# mpi.tgz: Debian's Open MPI, unused since the machine had its own, and fmnist/: Fashion-MNIST's
# test set and the first 4000 training images) carried as .gpu.
set -u
root=$PWD
W=$OUT/w
mkdir -p "$W"
exec > >(tee "$OUT/log.txt") 2>&1
start=$SECONDS
touch /tmp/marker
newmd() { find bench/results -maxdepth 1 -name '*.md' -newer /tmp/marker -exec cp {} "$W/" \; ; }
LIMIT=${LIMIT:-540}
pack() { tar -C "$OUT" -czf "$OUT/w.tgz" w 2>/dev/null; }
# Seconds for a step: at most $1, never past LIMIT (less 15 s for packing).
cap() { local l=$((LIMIT - 15 - (SECONDS - start))); ((l > $1)) && l=$1; ((l < 5)) && l=5; echo $l; }
step() { echo; echo "== [$((SECONDS - start)) s] $*"; }

step machine
date -u; id; nproc; uname -a; head -2 /etc/os-release; lscpu | grep -E "Model name|Socket|Core|Thread|NUMA|L3"
cat /proc/loadavg; command -v mpirun python3; python3 -c 'import torch; print("torch", torch.__version__)'
export LD_LIBRARY_PATH=$root/.gpu/lib
export BUILD_DIR=$root/.gpu
timeout 10 .gpu/bin/cpu-pair-latency 2>&1 | tail -3

step "Open MPI 4.1 from Debian bookworm (carried)"
if ! command -v mpirun >/dev/null; then tar -C / -xzf .gpu/mpi.tgz; fi
cat >/tmp/mpirun <<'EOS'
#!/bin/bash
export LD_LIBRARY_PATH=/opt/weft-mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec /usr/bin/orterun "$@"
EOS
chmod +x /tmp/mpirun
export MPIRUN=/tmp/mpirun
timeout 30 /tmp/mpirun --allow-run-as-root -np 2 .gpu/bin/mpi-bench allreduce -b 8 -e 1M -f 4 -n 10 -w 2 -c 1 2>&1 | tail -8

step "bench/compare --peer mpi --bind"
timeout -k 10 "$(cap 200)" bench/compare --peer mpi --bind > "$W/compare-mpi.txt" 2>&1
echo "exit $?"; tail -45 "$W/compare-mpi.txt"; newmd; pack

step "weft_torch against this torch (CPU tensors)"
prefix=/tmp/torch-prefix
mkdir -p $prefix/lib/pkgconfig && ln -sfn "$root/include" $prefix/include
cp -P .gpu/lib/libweft.so* $prefix/lib/ && ln -sf libweft.so.0 $prefix/lib/libweft.so && cp .gpu/weft.pc $prefix/lib/pkgconfig/
rm -rf /tmp/torch-src && cp -r python /tmp/torch-src
(cd /tmp/torch-src && MAX_JOBS=16 WEFT_TORCH_CUDA=0 WEFT_PREFIX=$prefix timeout "$(cap 150)" \
  python3 -m pip install --no-build-isolation --no-deps --target /tmp/torch-site .) > "$W/torch-build.log" 2>&1
echo "build exit $?"; tail -3 "$W/torch-build.log"

step "DDP MLP, 20M parameters, batch 1, 30 steps: weft and gloo take turns"
for round in 1 2 3; do
  for backend in weft gloo; do
    PYTHONPATH=/tmp/torch-site timeout "$(cap 60)" .gpu/bin/weftrun -n 2 --timeout 120 python3 \
      examples/ddp/train_fashion_mnist.py --backend $backend --model mlp --max-steps 30 --batch 1 \
      --data .gpu/fmnist --save /tmp/m.pt > "$W/mlp-$backend-$round.txt" 2>&1
    echo "round $round $backend (exit $?): $(tail -1 "$W/mlp-$backend-$round.txt")"
  done
done
pack

step "bench/tuner_accuracy.py --quick"
timeout -k 10 "$(cap 400)" python3 bench/tuner_accuracy.py --quick --name h200-host > "$W/tuner.txt" 2>&1
echo "exit $?"; tail -30 "$W/tuner.txt"; newmd
cat /proc/loadavg
pack
step done
