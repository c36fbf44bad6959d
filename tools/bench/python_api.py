#!/usr/bin/env python3
"""torchmt's Python API against ctranslate2.Translator and against the torchmt CLI, on the same
weights (the checkpoint and its CTranslate2 export) and the same sentences, each engine in
processes of its own, alternated round by round.

    python3 tools/bench/python_api.py -m runs/quickstart/checkpoint_best.pt \
        [--src data/multi30k/test_2016_flickr.de.gz] [--binary build/torchmt] [--rounds 2] \
        [--beams 1,5] [--batch-sizes 64,1] [--dtypes fp32,int8] [--settings 2x1,1x2] \
        [--sentences N] [--fixed-length L] [--engines py,cli,ct2]

--fixed-length L decodes every sentence up to L tokens in every engine (no a * source + b limit),
as bench_translate --fixed-length does: an undertrained model's looping lines then cost all
engines alike (the base-size memory rows).

For every row (search x batch x precision) it prints each engine's decoding seconds (loading
excluded; the best worker setting of the best round), its whole process's peak RSS, the ratios
CTranslate2 / torchmt (over 1: torchmt faster) and Python / CLI, and whether the Python API's
lines equal the CLI's. The package must be importable (pip install ., or PYTHONPATH=build/python).
"""
import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import shutil
import tempfile

PY_TORCHMT = r"""
import json, resource, sys, time
import torchmt
torchmt.limit_library_isas()  # the CLI's kernels, so that int8 lines can be compared
a = json.loads(sys.argv[1])
if a["batch"] >= 32:
    torchmt.use_one_heap_arena()  # the CLI's heap policy (cli_options.h)
if a["pool"]:
    torchmt.use_cpu_tensor_pool()  # as translate --tensor-pool
lines = open(a["src"], encoding="utf-8").read().split("\n")[:-1]
compute = {"fp32": "float32", "int8": "int8"}[a["dtype"]]
t = torchmt.Translator(a["model"], compute_type=compute, inter_threads=a["workers"], intra_threads=a["threads"])
options = dict(beam_size=a["beam"], max_batch_size=a["batch"], length_penalty=0.6)
if a["fixed_length"]:
    options.update(max_len_a=0.0, max_len_b=a["fixed_length"], max_decoding_length=a["fixed_length"])
t.translate_batch(lines[:4], **options)  # warm-up
start = time.perf_counter()
results = t.translate_batch(lines, **options)
seconds = time.perf_counter() - start
open(a["out"], "w", encoding="utf-8").write("".join(r.hypotheses[0] + "\n" for r in results))
print(json.dumps({"seconds": seconds}))
"""

PY_CT2 = r"""
import json, sys, time
import ctranslate2, sentencepiece
a = json.loads(sys.argv[1])
lines = open(a["src"], encoding="utf-8").read().split("\n")[:-1]
sp = sentencepiece.SentencePieceProcessor(model_file=a["model"] + "/source.spm")
tp = sentencepiece.SentencePieceProcessor(model_file=a["model"] + "/target.spm")
compute = {"fp32": "float32", "int8": "int8_float32"}[a["dtype"]]
t = ctranslate2.Translator(a["model"], device="cpu", compute_type=compute, inter_threads=a["workers"],
                           intra_threads=a["threads"])
options = dict(beam_size=a["beam"], max_batch_size=a["batch"], batch_type="examples", length_penalty=0.6,
               max_decoding_length=a["fixed_length"] or 256)
t.translate_batch([sp.encode(l, out_type=str) for l in lines[:4]], **options)  # warm-up
start = time.perf_counter()
results = t.translate_batch([sp.encode(l, out_type=str) for l in lines], **options)
texts = [tp.decode(r.hypotheses[0]) for r in results]
seconds = time.perf_counter() - start
open(a["out"], "w", encoding="utf-8").write("".join(x + "\n" for x in texts))
print(json.dumps({"seconds": seconds}))
"""


def peak_mib(cmd, env=None):
    """Runs cmd under os.wait4 so that its own peak RSS is known."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        tail = err.strip().splitlines()[-1:] if err.strip() else []
        sys.exit(f"python_api: {' '.join(cmd[:4])} failed ({p.returncode}): {tail}")
    return out, err, usage.ru_maxrss / 1024.0


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", required=True, help="a torchmt checkpoint")
    p.add_argument("--src", default="data/multi30k/test_2016_flickr.de.gz")
    p.add_argument("--binary", default="build/torchmt")
    p.add_argument("--ct2", help="its CTranslate2 export (default: exported into a temporary directory)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--beams", default="1,5")
    p.add_argument("--batch-sizes", default="64,1")
    p.add_argument("--dtypes", default="fp32,int8")
    p.add_argument("--settings", default="2x1,1x2", help="WORKERSxTHREADS,...: each engine gets its best")
    p.add_argument("--sentences", type=int, default=0, help="the first N sentences of --src (0: all)")
    p.add_argument("--fixed-length", type=int, default=0, help="every engine decodes up to L tokens (0: natural limits)")
    p.add_argument("--engines", default="py,cli,ct2", help="a subset of py,cli,ct2")
    p.add_argument("--pool", action="store_true",
                   help="torchmt's tensor pool in the Python API (use_cpu_tensor_pool()) and the CLI (--tensor-pool)")
    a = p.parse_args()
    for path, what in ((a.model, "--model"), (a.src, "--src"), (a.binary, "--binary")):
        if not os.path.exists(path):
            sys.exit(f"python_api: {what} {path}: no such file")
    settings = [tuple(int(x) for x in s.split("x")) for s in a.settings.split(",")]
    engines = a.engines.split(",")
    if not engines or any(e not in ("py", "cli", "ct2") for e in engines):
        sys.exit(f"python_api: --engines {a.engines}: expected a subset of py,cli,ct2")
    tmp = tempfile.mkdtemp(prefix="python_api.")
    try:
        run(a, settings, engines, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a, settings, engines, tmp):
    src = os.path.join(tmp, "src.txt")
    opener = gzip.open if a.src.endswith(".gz") else open
    with opener(a.src, "rt", encoding="utf-8") as f, open(src, "w", encoding="utf-8") as out:
        text = f.read()
        if a.sentences > 0:
            text = "".join(line + "\n" for line in text.split("\n")[:a.sentences])
        out.write(text)
    ct2 = a.ct2
    if not ct2:
        ct2 = os.path.join(tmp, "ct2")
        peak_mib([a.binary, "export", "-m", a.model, "--format", "ctranslate2", "-o", ct2])
    floor = peak_mib([a.binary, "--version"])[2]
    print(f"python_api: {cpu_name()}, {os.cpu_count()} CPUs; {sum(1 for _ in open(src))} sentences of {a.src}; "
          f"`torchmt --version` peak RSS {floor:.0f} MiB", flush=True)
    header = ("row", "py s", "cli s", "ct2 s", "ct2/py", "py/cli", "py MiB", "cli MiB", "ct2 MiB", "same lines")
    print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header), flush=True)
    for dtype in a.dtypes.split(","):
        for beam in map(int, a.beams.split(",")):
            for batch in map(int, a.batch_sizes.split(",")):
                best = {"py": float("nan"), "cli": float("nan"), "ct2": float("nan")}
                rss = {"py": 0.0, "cli": 0.0, "ct2": 0.0}
                outs = {}
                for _ in range(a.rounds):
                    for workers, threads in settings:
                        job = dict(src=src, dtype=dtype, beam=beam, batch=batch, workers=workers, threads=threads,
                                   pool=a.pool, fixed_length=a.fixed_length)
                        for engine in engines:
                            out = os.path.join(tmp, f"{engine}.txt")
                            if engine == "py":
                                cmd = [sys.executable, "-c", PY_TORCHMT, json.dumps(dict(job, model=a.model, out=out))]
                            elif engine == "ct2":
                                cmd = [sys.executable, "-c", PY_CT2, json.dumps(dict(job, model=ct2, out=out))]
                            else:
                                cmd = [a.binary, "translate", "-m", a.model, "-q", "--dtype", dtype, "--beam", str(beam),
                                       "--batch-size", str(batch), "--workers", str(workers), "--threads-per-worker",
                                       str(threads), "-i", src, "-o", out] + (["--tensor-pool"] if a.pool else [])
                                if a.fixed_length:
                                    cmd += ["--max-len-a", "0", "--max-len-b", str(a.fixed_length)]
                            stdout, stderr, mib = peak_mib(cmd)
                            if engine == "cli":
                                # "translated N lines in S s (...)": decoding, loading excluded, as the others.
                                line = [l for l in stderr.splitlines() if l.startswith("translated ")][-1]
                                seconds = float(line.split(" in ")[1].split(" s")[0])
                            else:
                                seconds = json.loads(stdout.strip().splitlines()[-1])["seconds"]
                            if not seconds >= best[engine]:  # NaN: none yet
                                best[engine] = seconds
                            rss[engine] = max(rss[engine], mib)
                            outs[engine] = open(out, encoding="utf-8").read()
                same = outs["py"] == outs["cli"] if "py" in outs and "cli" in outs else None
                py, cli, c2 = best["py"], best["cli"], best["ct2"]
                print(f"| {'greedy' if beam == 1 else f'beam {beam}'} batch {batch} {dtype} | {py:.2f} | {cli:.2f} | "
                      f"{c2:.2f} | {c2 / py:.2f}x | {py / cli:.3f} | {rss['py']:.0f} | {rss['cli']:.0f} | "
                      f"{rss['ct2']:.0f} | {'-' if same is None else 'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
