#!/usr/bin/env bash
# The whole road on one machine, no network: a text corpus, a SentencePiece
# tokenizer trained on it, the corpus tokenized, a LLaMA-style model trained,
# text generated, the model evaluated and exported for Hugging Face (and read
# back from there). docs/models.md shows these commands.
#   bash examples/road/road.sh [WORK_DIR]     (STEPS=N for a shorter run)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DSTRAIN="${DSTRAIN:-$HERE/../../build/dstrain}"
WORK="${1:-road}"
STEPS="${STEPS:-300}"
mkdir -p "$WORK" && cd "$WORK"

# 1. a corpus: Debian's fortunes (any UTF-8 text will do)
cat /usr/share/games/fortunes/{fortunes,literature,riddles,people,wisdom} > corpus.txt

# 2. a SentencePiece tokenizer trained on it (Debian's sentencepiece)
spm_train --input=corpus.txt --model_prefix=tokenizer --vocab_size=2000 --model_type=bpe \
  --character_coverage=1.0 --bos_id=1 --eos_id=2 --unk_id=0 --minloglevel=2

# 3. the corpus as tokens (llm.c's .bin format; the last 5% of it for validation)
"$DSTRAIN" tokenize --tokenizer tokenizer.model --out train.bin --val-out val.bin corpus.txt

# 4. a LLaMA-style model trained on them
"$DSTRAIN" train --config "$HERE/ds_config.json" --model "$HERE/llama.json" --data train.bin \
  --seq-len 128 --steps "$STEPS" --save ckpt --quiet

# 5. text from it, and its loss on the held-out tokens
"$DSTRAIN" generate --load ckpt --tokenizer tokenizer.model --prompt "The meaning of life" \
  --max-new-tokens 40 --temperature 0.8 --top-k 40 --seed 1
"$DSTRAIN" eval --load ckpt --data val.bin --seq-len 128

# 6. exported for Hugging Face (transformers' LlamaForCausalLM reads it), and read back
"$DSTRAIN" ckpt export ckpt --format hf --out hf_model
cp tokenizer.model hf_model/
"$DSTRAIN" generate --model hf_model --prompt "The meaning of life" --max-new-tokens 40 \
  --temperature 0.8 --top-k 40 --seed 1
