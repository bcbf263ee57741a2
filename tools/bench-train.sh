#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-train.sh: molly-train against PyTorch (tools/bench-train.py), same machine, same run,
# alternated, medians (issue #19; results in docs/PERFORMANCE.md).
#   LoRA rank 16 on q,k,v,o of the 100m shape (768 hidden, 12 layers; the stories260K
#   vocabulary so the data tokenizes), batch 8 × 256 tokens, 2 threads; full training of a
#   ~10M-parameter llama shape (256 hidden, 12 layers, 8 heads, ffn 768), same batch; the
#   100m LoRA again on a Q8_0 base (PyTorch has none).
# Usage: tools/bench-train.sh BUILD_DIR [ROUNDS (3)] [STEPS (4)]
set -eu
build=${1:?build dir}
rounds=${2:-3}
steps=${3:-4}
src=$(cd "$(dirname "$0")/.." && pwd)
shared=${MOLLY_SHARED_DIR:-$src/../shared}
work=${MOLLY_BENCH_DIR:-/var/tmp/molly-bench-train}
mkdir -p "$work"
vocab=$shared/models/stories260K.gguf
mk() { [ -f "$work/$1" ] || "$build/bin/molly-mkmodel" --vocab "$vocab" "${@:2}" --out "$work/$1" >/dev/null; }
mk m100-f32.gguf --preset 100m
mk m100-q8_0.gguf --preset 100m --type q8_0
mk m10-f32.gguf --preset 100m --hidden 256 --layers 12 --heads 8 --kv-heads 8 --ffn 768
# long texts, cut to 256 tokens, one per row: every row full
/usr/bin/python3 - "$work/data.jsonl" <<'PY'
import json, random, sys
random.seed(1)
w = "once upon a time there was a little girl named lily she liked to play with her ball in the park one day the sun was bright and warm tom saw a big dog".split()
with open(sys.argv[1], "w") as f:
    for _ in range(256):
        f.write(json.dumps({"text": " ".join(random.choice(w) for _ in range(400))}) + "\n")
PY
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 -c 'import torch; print("# torch", torch.__version__); print(torch.__config__.show())' | sed 's/^/# /'
molly() { # molly NAME MODEL ARGS...
	local out
	out=$( { /usr/bin/time -f 'RSS %M' "$build/bin/molly-train" --model "$work/$2" --data "$work/data.jsonl" \
		--out "$work/out-$1" --steps "$steps" --batch 8 --seq-len 256 --no-pack --threads 2 --json \
		"${@:3}" 2>&1; } )
	local rss
	rss=$(echo "$out" | sed -n 's/^RSS //p')
	# tokens/s over the steps after the first: from the cumulative rate's definition
	echo "$out" | /usr/bin/python3 -c '
import json, sys
steps = [json.loads(l) for l in sys.stdin if l.startswith("{\"step\"")]
# tokens_per_s is cumulative since the start of the loop; recover each step time
t = [s["tokens"] for s in steps]
cum = [sum(t[:i + 1]) / s["tokens_per_s"] for i, s in enumerate(steps)]
dt = [cum[i] - cum[i - 1] for i in range(1, len(cum))]
print(json.dumps({"impl": "molly", "run": sys.argv[1], "tokens_per_s": sum(t[1:]) / sum(dt), "peak_rss_kb": int(sys.argv[2])}))
' "$1" "$rss"
}
torchrun() { # torchrun NAME ARGS...
	(unset $(env | grep -o '^OPENBLAS_[A-Z_]*') 2>/dev/null; /usr/bin/python3 "$src/tools/bench-train.py" "${@:2}" --steps "$steps" --threads 2) |
		sed "s/^{/{\"run\": \"$1\", /"
}
for r in $(seq 1 "$rounds"); do
	molly lora-100m m100-f32.gguf --rank 16 --targets q,k,v,o --format gguf
	torchrun lora-100m --mode lora --hidden 768 --layers 12 --heads 12 --ffn 2048 --vocab 512 --rank 16
	molly full-10m m10-f32.gguf --full
	torchrun full-10m --mode full --hidden 256 --layers 12 --heads 8 --ffn 768 --vocab 512
	molly lora-100m-q8_0 m100-q8_0.gguf --rank 16 --targets q,k,v,o --format gguf
done
