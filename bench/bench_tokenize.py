#!/usr/bin/python3
"""`dstrain tokenize` throughput against SentencePiece's own encoder, side by
side in one run. Prints MB/s and ratios; asserts nothing.

Corpus: the default training corpus (Debian's fortunes, the files without a
'.') repeated to --mb megabytes, plus a multilingual part (the tests' corpus
generator: German, Japanese, Russian, emoji). Tokenizers: a SentencePiece BPE
model trained on it by spm_train (vocab 8000), and a byte-level BPE
tokenizer.json (tests/python/bpe_files.py, 2000 merges). Runs, interleaved
--repeats times (median [min, max]):
  dstrain tokenize --threads N        (SentencePiece model; and tokenizer.json)
  spm_encode --output_format=id       (libsentencepiece's own command; 2 threads:
                                       two processes on the two halves)
Output files go to a temporary directory (/dev/shm when present).

    python3 bench/bench_tokenize.py --build-dir build [--mb 32] [--repeats 3]
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "python"))


def corpus_text(mb):
    import test_tokenizers
    d = pathlib.Path("/usr/share/games/fortunes")
    base = "".join(p.read_text(errors="replace") for p in sorted(d.iterdir())
                   if p.is_file() and "." not in p.name)
    base += test_tokenizers.corpus(20000, seed=3)
    reps = max(1, int(mb * 1e6 // len(base.encode())))
    return base * reps


def timed(cmd, env=None):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


def timed_parallel(cmds):
    t = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"{cmds} failed")
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=str(REPO / "build"))
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    dstrain = str(pathlib.Path(args.build_dir) / "dstrain")
    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        tmp = pathlib.Path(tmp)
        text = corpus_text(args.mb)
        data = tmp / "corpus.txt"
        data.write_text(text)
        size = data.stat().st_size
        lines = text.splitlines(keepends=True)
        halves = [tmp / "a.txt", tmp / "b.txt"]
        halves[0].write_text("".join(lines[: len(lines) // 2]))
        halves[1].write_text("".join(lines[len(lines) // 2:]))
        sample = tmp / "sample.txt"
        sample.write_text(text[:3_000_000])
        subprocess.run(["spm_train", f"--input={sample}", f"--model_prefix={tmp / 'spm'}",
                        "--vocab_size=8000", "--model_type=bpe", "--character_coverage=1.0",
                        "--input_sentence_size=200000", "--shuffle_input_sentence=true"],
                       check=True, capture_output=True)
        import bpe_files
        bpe_files.write(tmp / "bpe", text[:1_000_000], 2000, "gpt2")
        spm = str(tmp / "spm.model")
        runs = {}

        def add(name, seconds):
            runs.setdefault(name, []).append(size / 1e6 / seconds)

        for _ in range(args.repeats):
            for n in (1, 2):
                env = dict(os.environ, OMP_NUM_THREADS="1")
                add(f"dstrain spm {n}t", timed([dstrain, "tokenize", "--tokenizer", spm, "--out",
                                               str(tmp / "o.bin"), "--quiet", "--threads",
                                               str(n), str(data)], env))
                add(f"dstrain bpe {n}t", timed([dstrain, "tokenize", "--tokenizer",
                                               str(tmp / "bpe"), "--out", str(tmp / "o.bin"),
                                               "--quiet", "--threads", str(n), str(data)], env))
            add("spm_encode 1t", timed(["sh", "-c", f"spm_encode --model={spm} "
                                        f"--output_format=id < {data} > {tmp / 'ids.txt'}"]))
            add("spm_encode 2t", timed_parallel(
                [["sh", "-c", f"spm_encode --model={spm} --output_format=id < {h} > {h}.ids"]
                 for h in halves]))

        def med(name):
            return statistics.median(runs[name])

        print(f"corpus {size / 1e6:.1f} MB (fortunes + multilingual), {args.repeats} interleaved "
              f"runs, MB/s median [min, max]")
        for name, values in runs.items():
            print(f"  {name:<16} {med(name):7.1f} [{min(values):.1f}, {max(values):.1f}]")
        for n in (1, 2):
            print(f"dstrain / spm_encode, SentencePiece, {n} thread(s): "
                  f"{med(f'dstrain spm {n}t') / med(f'spm_encode {n}t'):.2f}x")


if __name__ == "__main__":
    main()
