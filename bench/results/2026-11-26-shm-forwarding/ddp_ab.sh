#!/bin/bash
# DDP MLP A/B: weft with and without shm forwarding, gloo, and the no-exchange floor; interleaved rounds.
cd /work/main
for round in 1 2 3; do
  for v in "weft-fwd:weft:1:" "weft-nofwd:weft:0:" "gloo:gloo:1:" "floor:gloo:1:--no-exchange"; do
    IFS=: read name backend fw extra <<< "$v"
    out=$(env WEFT_SHM_FORWARD=$fw PYTHONPATH=build/python build/bin/weftrun -n 2 /usr/bin/python3 examples/ddp/train_fashion_mnist.py \
      --backend $backend --model mlp --max-steps 30 --batch 1 --save /tmp/m.pt $extra 2>&1 | tail -1)
    echo "round $round $name: $out"
  done
done
