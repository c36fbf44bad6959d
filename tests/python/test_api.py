"""The Python package against the CLI and CTranslate2's API shape: agreement, every option,
threads, interruption, the host's settings and bad input."""

import math
import os
import signal
import subprocess
import threading
import time

import pytest
import torch

import torchmt
from conftest import run_python, train_options


def cli_translate(binary, model, lines, *flags):
    # On the CPU, as the Translators it is compared with (the command's "auto" takes a GPU).
    r = subprocess.run([binary, "translate", "-m", model, "-q", "--device", "cpu", *flags], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[: len(lines)]


def test_train_reports_progress_and_writes_a_checkpoint(trained):
    path, seen, summary = trained
    assert os.path.exists(path)
    assert summary["steps"] == 1000 and not summary["interrupted"]
    assert any(step == 10 for step, _ in seen), seen[:5]  # update lines carry their step
    assert any(step == -1 and "valid" in line for step, line in seen)


@pytest.mark.parametrize("compute_type, dtype", [("float32", "fp32"), ("int8", "int8")])
@pytest.mark.parametrize("beam", [1, 4])
def test_agrees_with_the_cli(trained, binary, sample, compute_type, dtype, beam):
    model = trained[0]
    lines = sample[0][:80] + ["", "   "]
    translator = torchmt.Translator(model, compute_type=compute_type, inter_threads=2)
    assert translator.compute_type == dtype
    got = [r.hypotheses[0] for r in translator.translate_batch(lines, beam_size=beam, max_batch_size=16)]
    want = cli_translate(binary, model, lines, "--dtype", dtype, "--beam", str(beam), "--batch-size", "16")
    assert got == want
    assert len(set(got)) > 5  # a model that says something, and not always the same thing
    assert got[-1] == "" and got[-2] == ""  # blank in, blank out


def test_torchscript_export_translates_as_its_checkpoint(trained, binary, sample, tmp_path):
    exported = str(tmp_path / "model.ts")
    r = subprocess.run([binary, "export", "-m", trained[0], "-o", exported], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = sample[0][:40]
    ts = torchmt.Translator(exported, compute_type="float32")
    # The export's steps compute the whole output projection; the checkpoint's beam screen takes
    # int8 logits in the normaliser's tail (~2e-4), enough to flip a near-tie (line 30 on a Zen 3).
    ckpt = torchmt.Translator(trained[0], compute_type="float32", runtime={"screened_beam": False})
    got = ts.translate_batch(lines, beam_size=3, num_hypotheses=2, return_scores=True)
    want = ckpt.translate_batch(lines, beam_size=3, num_hypotheses=2, return_scores=True)
    assert [r.hypotheses for r in got] == [r.hypotheses for r in want]
    assert [s for r in got for s in r.scores] == pytest.approx([s for r in want for s in r.scores], abs=1e-4)


def test_token_input_gives_token_output(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    lines = sample[0][:10]
    tokens = [translator.tokenize(line) for line in lines]
    assert all(isinstance(t, list) and t for t in tokens)
    by_tokens = translator.translate_batch(tokens)
    by_text = translator.translate_batch(lines)
    for t, s in zip(by_tokens, by_text):
        assert isinstance(t.hypotheses[0], list)
        assert "".join(t.hypotheses[0]).replace("\u2581", " ").strip() == s.hypotheses[0]


def test_nbest_scores_and_result_shape(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    results = translator.translate_batch(sample[0][:6], beam_size=4, num_hypotheses=3, return_scores=True)
    for r in results:
        assert len(r.hypotheses) == 3 and len(r.scores) == 3 and len(r.log_probs) == 3
        assert r.scores == sorted(r.scores, reverse=True)
        assert r[0]["text"] == r.hypotheses[0] and r[0]["score"] == r.scores[0]
    plain = translator.translate_batch(sample[0][:2])
    assert plain[0].scores == [] and len(plain[0]) == 1


def test_prefix_constraints_and_sampling(trained, sample, binary, tmp_path):
    model = trained[0]
    translator = torchmt.Translator(model, compute_type="float32")
    lines = sample[0][:8]
    prefixed = translator.translate_batch(lines, target_prefix=["A dog"] * 8, beam_size=2)
    assert all(r.hypotheses[0].startswith("A dog") for r in prefixed)
    assert translator.translate_batch(lines[:2], target_prefix=[None, "The"])[1].hypotheses[0].startswith("The")
    # A prefix longer than the model's output holds is cut, and said (as a source would be).
    assert translator.translate_batch(lines[:1], target_prefix=["dog " * 2000])[0].truncated
    assert not prefixed[0].truncated
    constrained = translator.translate_batch(lines, constraints=[["umbrella"]] * 8, beam_size=4)
    assert all("umbrella" in r.hypotheses[0] for r in constrained)
    # Sampling: a line's draws depend on the seed and its position only (the CLI's too).
    a = translator.translate_batch(lines, sampling_topk=0, seed=7, max_batch_size=3)
    b = translator.translate_batch(lines, sampling_topk=0, seed=7, max_batch_size=8)
    c = translator.translate_batch(lines, sampling_topk=0, seed=8)
    assert [r.hypotheses for r in a] == [r.hypotheses for r in b]
    assert [r.hypotheses for r in a] != [r.hypotheses for r in c]
    want = cli_translate(binary, model, lines, "--dtype", "fp32", "--sampling-topk", "0", "--seed", "7")
    assert [r.hypotheses[0] for r in a] == want
    streamed = list(translator.translate_iterable(iter(lines), buffer_size=3, sampling_topk=0, seed=7))
    assert [r.hypotheses for r in streamed] == [r.hypotheses for r in a]
    # Each source keeps its own constraints whatever the buffer (they once went whole to every chunk).
    phrases = [["umbrella"], None, ["umbrella"], None, None, None, None, None]
    chunked = list(translator.translate_iterable(iter(lines), buffer_size=3, beam_size=4, constraints=phrases))
    assert [r.hypotheses for r in chunked] == [r.hypotheses for r in translator.translate_batch(
        lines, beam_size=4, constraints=phrases)]
    with pytest.raises(ValueError, match="constraints"):
        list(translator.translate_iterable(iter(lines), buffer_size=3, beam_size=4, constraints=phrases[:4]))


def test_generate_tokens_streams_translate_batchs_tokens(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    for line in sample[0][:6]:
        steps = list(translator.generate_tokens(line))
        best = translator.translate_batch([line], return_scores=True)[0]
        assert [s.token for s in steps] == translator.translate_batch([translator.tokenize(line)])[0].hypotheses[0]
        assert [s.step for s in steps] == list(range(len(steps)))
        assert [s.is_last for s in steps] == [False] * (len(steps) - 1) + [True]
        assert all(s.log_prob <= 0 for s in steps)
        # The eos step's log-probability is in the sentence's, not in any token's.
        assert sum(s.log_prob for s in steps) >= best.log_probs[0] - 1e-4
    sampled = [s.token for s in translator.generate_tokens(sample[0][0], sampling_topk=0, seed=5)]
    assert sampled == translator.translate_batch([translator.tokenize(sample[0][0])], sampling_topk=0,
                                                 seed=5)[0].hypotheses[0]
    with pytest.raises(TypeError, match="seed"):
        next(translator.generate_tokens("gut", seed="5"))


def test_token_rules_take_ctranslate2s_keywords_and_agree_with_the_cli(trained, binary, sample):
    model = trained[0]
    translator = torchmt.Translator(model, compute_type="float32")
    lines = sample[0][:20]
    tokens = [translator.tokenize(line) for line in lines]
    # At least 40 tokens each where the limit (0 * source + 100) leaves room; without, most are shorter.
    long = translator.translate_batch(tokens, min_decoding_length=40, max_len_a=0, max_len_b=100)
    assert all(len(r.hypotheses[0]) >= 40 for r in long)
    assert sum(len(r.hypotheses[0]) < 40 for r in translator.translate_batch(tokens)) > 10
    for beam in (1, 3):
        ruled = translator.translate_batch(tokens, beam_size=beam, no_repeat_ngram_size=2, disable_unk=True,
                                           min_decoding_length=40, max_len_a=0, max_len_b=100)
        for r in ruled:
            pieces = r.hypotheses[0]
            bigrams = list(zip(pieces, pieces[1:]))
            assert len(bigrams) == len(set(bigrams)), pieces
            assert "<unk>" not in pieces
        options = dict(no_repeat_ngram_size=3, repetition_penalty=1.5, min_decoding_length=6)
        want = cli_translate(binary, model, lines, "--dtype", "fp32", "--beam", str(beam), "--lenpen", "0.6",
                             "--no-repeat-ngram-size", "3", "--repetition-penalty", "1.5", "--min-len", "6")
        assert [r.hypotheses[0] for r in translator.translate_batch(lines, beam_size=beam, **options)] == want
        if beam == 1:
            streamed = [s.token for s in translator.generate_tokens(tokens[0], **options)]
            assert streamed == translator.translate_batch(tokens[:1], **options)[0].hypotheses[0]
    patient = translator.translate_batch(lines, beam_size=3, patience=2.0)
    assert [r.hypotheses[0] for r in patient] == cli_translate(binary, model, lines, "--dtype", "fp32", "--beam", "3",
                                                               "--patience", "2")
    with pytest.raises(ValueError, match="patience"):
        translator.translate_batch(lines[:1], beam_size=2, patience=0.1)
    with pytest.raises(ValueError, match="repetition_penalty"):
        translator.translate_batch(lines[:1], repetition_penalty=0)
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        translator.translate_batch(lines[:1], no_repeat_ngram_size=-1)
    with pytest.raises(TypeError, match="min_decoding_length"):
        translator.translate_batch(lines[:1], min_decoding_length="3")
    with pytest.raises(TypeError, match="disable_unk"):
        translator.translate_batch(lines[:1], disable_unk="false")


def test_score_batch_scores_translations_as_translate_batch_scored_them(trained, binary, sample, tmp_path):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    lines = sample[0][:20]
    results = translator.translate_batch(lines, beam_size=3, num_hypotheses=3, return_scores=True)
    sources = [line for line, r in zip(lines, results) for _ in r.hypotheses]
    targets = [h for r in results for h in r.hypotheses]
    scores = [s for r in results for s in r.scores]
    scored = translator.score_batch(sources, targets, max_batch_size=7)
    assert len(scored) == len(targets)
    # A text that tokenizes back to its hypothesis's pieces scores as the search scored it.
    close = sum(abs(s.score - want) <= 1e-4 * (1 + abs(want)) for s, want in zip(scored, scores))
    assert close >= len(scores) * 0.9
    for s in scored:
        assert s.tokens[-1] == "</s>" and len(s.tokens) == len(s.log_probs)
        assert abs(sum(s.log_probs) - s.log_prob) < 1e-3 and not s.truncated
    # Token lists in (CTranslate2's form), and the CLI's TSV: the same scores.
    pieces = translator.score_batch([translator.tokenize(x) for x in sources[:6]],
                                    [s.tokens[:-1] for s in scored[:6]])
    assert all(abs(p.score - s.score) < 1e-4 for p, s in zip(pieces, scored[:6]))
    (tmp_path / "src.de").write_text("".join(x + "\n" for x in sources), encoding="utf-8")
    (tmp_path / "tgt.en").write_text("".join(x + "\n" for x in targets), encoding="utf-8")
    out = subprocess.run([binary, "score", "-m", trained[0], "--dtype", "fp32", "--device", "cpu", "-q", "--src", str(tmp_path / "src.de"),
                          "--tgt", str(tmp_path / "tgt.en")], capture_output=True, text=True, check=True).stdout
    cli = [float(row.split("\t")[0]) for row in out.splitlines()]
    same_batches = translator.score_batch(sources, targets)  # the command's batch size
    assert len(cli) == len(scored) and all(abs(c - s.score) < 2e-6 for c, s in zip(cli, same_batches))
    with pytest.raises(ValueError, match="one entry per source"):
        translator.score_batch(sources[:2], targets[:1])
    with pytest.raises(ValueError, match=r"target\[0\].*UTF-8"):
        translator.score_batch(["gut"], ["bad \udcff"])


def test_alignments(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    results = translator.translate_batch(sample[0][:5], return_alignments=True, beam_size=2, num_hypotheses=2)
    aligned = 0
    for line, r in zip(sample[0][:5], results):
        assert len(r.alignments) == 2
        for (hyp, pairs) in zip(r.hypotheses, r.alignments):
            assert bool(pairs) == bool(hyp.split()), (hyp, pairs)  # every word of a hypothesis has a link
            assert all(0 <= s < len(line.split()) and 0 <= t < len(hyp.split()) for s, t in pairs)
            aligned += bool(pairs)
    assert aligned >= 5
    assert translator.translate_batch(["", "Guten Morgen!"], return_alignments=True)[0].alignments == [[]]


def test_attention_vectors(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    tokens = [translator.tokenize(line) for line in sample[0][:6]]
    results = translator.translate_batch(tokens, return_attention=True, beam_size=2, num_hypotheses=2)
    for source, r in zip(tokens, results):
        assert len(r.attention) == 2
        for hyp, rows in zip(r.hypotheses, r.attention):
            assert len(rows) == len(hyp)  # one row per target token
            for row in rows:
                assert len(row) == len(source) + 1  # the source tokens and its end
                assert min(row) >= 0 and abs(sum(row) - 1) < 1e-4
    # Each token's alignment is where its row weighs most (word level: the pieces' words).
    text = translator.translate_batch(sample[0][:6], return_attention=True, return_alignments=True)
    assert all(r.attention and r.alignments for r in text)
    assert translator.translate_batch(["", "gut"], return_attention=True)[0].attention == [[]]
    assert translator.translate_batch(["gut"])[0].attention == []
    with pytest.raises(TypeError, match="return_attention"):
        translator.translate_batch(["gut"], return_attention="yes")


def test_translate_iterable_is_lazy_and_in_order(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    lines = sample[0][:50]
    taken = []

    def source():
        for line in lines:
            taken.append(line)
            yield line

    stream = translator.translate_iterable(source(), buffer_size=16, max_batch_size=4)
    first = next(stream)
    assert len(taken) == 16  # one buffer read, no more
    rest = list(stream)
    whole = translator.translate_batch(lines, max_batch_size=4)
    assert [r.hypotheses for r in [first] + rest] == [r.hypotheses for r in whole]
    with pytest.raises(ValueError, match="target_prefix"):
        list(translator.translate_iterable(lines[:5], target_prefix=["A"] * 4))


def test_asynchronous_calls_return_handles_and_run_on_the_translators_threads(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32", inter_threads=2)
    lines = sample[0][:40]
    want = translator.translate_batch(lines, beam_size=2, return_scores=True)
    main = threading.get_ident()
    seen = []
    original = translator._native.translate

    def spy(*args):  # which thread runs the batch
        seen.append(threading.get_ident())
        return original(*args)

    translator._native = _Spy(translator._native, translate=spy)
    handles = translator.translate_batch(lines, beam_size=2, return_scores=True, asynchronous=True)
    assert len(handles) == len(lines) and all(isinstance(h, torchmt.AsyncTranslationResult) for h in handles)
    got = [h.result() for h in handles]
    assert all(h.done() for h in handles)
    assert [r.hypotheses for r in got] == [r.hypotheses for r in want]
    assert [r.scores for r in got] == [r.scores for r in want]
    assert seen and main not in seen
    # Two batches at once on two threads give what they give one after the other.
    first = translator.translate_batch(lines[:20], asynchronous=True)
    second = translator.translate_batch(lines[20:], asynchronous=True)
    assert [h.result().hypotheses for h in first + second] == [r.hypotheses for r in translator.translate_batch(lines)]
    pairs = translator.score_batch(lines[:5], [r.hypotheses[0] for r in want[:5]], asynchronous=True)
    assert all(isinstance(p, torchmt.AsyncScoringResult) for p in pairs)
    assert [p.result().log_prob for p in pairs] == [s.log_prob for s in
                                                    translator.score_batch(lines[:5], [r.hypotheses[0] for r in want[:5]])]
    # Bad options raise at the call; a failure inside the batch at result().
    with pytest.raises(ValueError, match="beam_size"):
        translator.translate_batch(lines, beam_size=0, asynchronous=True)
    with pytest.raises(TypeError, match="asynchronous"):
        translator.translate_batch(lines, asynchronous="yes")
    with pytest.raises(ValueError, match="asynchronous"):
        list(translator.translate_iterable(lines, asynchronous=True))
    def broken(*args):
        raise RuntimeError("the batch failed")

    translator._native = _Spy(translator._native, translate=broken)
    failing = translator.translate_batch(["gut", "schlecht"], asynchronous=True)
    for handle in failing:
        with pytest.raises(RuntimeError, match="the batch failed"):
            handle.result()


def test_translate_file_writes_the_clis_lines_whole(trained, binary, sample, tmp_path):
    model = trained[0]
    translator = torchmt.Translator(model, compute_type="float32")
    lines = sample[0][:30]
    src = tmp_path / "in.de"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.en"
    stats = translator.translate_file(src, out, beam_size=2, read_batch_size=7, max_batch_size=4)
    want = cli_translate(binary, model, lines, "--dtype", "fp32", "--beam", "2")
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == want
    assert stats.num_examples == 30
    whole = translator.translate_batch(lines, beam_size=2, max_batch_size=0)  # CTranslate2's "no limit"
    assert [r.hypotheses[0] for r in whole] == [r.hypotheses[0] for r in translator.translate_batch(lines, beam_size=2)]
    with pytest.raises(ValueError, match="max_batch_size"):
        translator.translate_batch(lines, max_batch_size=-1)
    bom = tmp_path / "bom.de"  # a byte-order mark is no text, as for the CLI; CRLF ends lines as LF
    bom.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    translator.translate_file(bom, tmp_path / "bom.en", beam_size=2)
    assert (tmp_path / "bom.en").read_text(encoding="utf-8") == out.read_text(encoding="utf-8")
    os.unlink(bom)
    os.unlink(tmp_path / "bom.en")
    assert stats.num_tokens == sum(len(r.hypotheses[0]) for r in translator.translate_batch(
        [translator.tokenize(line) for line in lines], beam_size=2))
    assert stats.total_time_in_ms > 0
    # n-best with scores, CTranslate2's "score ||| text", num_hypotheses lines per source
    translator.translate_file(src, out, beam_size=3, num_hypotheses=2, with_scores=True)
    written = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(written) == 60 and all(" ||| " in line for line in written)
    assert float(written[0].split(" ||| ")[0]) >= float(written[1].split(" ||| ")[0])
    # Token functions: pieces in, pieces joined by spaces out.
    translator.translate_file(src, out, source_tokenize_fn=translator.tokenize)
    pieces = translator.translate_batch([translator.tokenize(line) for line in lines])
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == [" ".join(r.hypotheses[0]) for r in pieces]
    # Prefixes from target_path; a count that differs is named, and the old output stays.
    prefix = tmp_path / "prefix.en"
    prefix.write_text("A dog\n" * 30, encoding="utf-8")
    translator.translate_file(src, out, prefix)
    assert all(line.startswith("A dog") for line in out.read_text(encoding="utf-8").split("\n")[:-1])
    before = out.read_bytes()
    prefix.write_text("A dog\n" * 29, encoding="utf-8")
    with pytest.raises(ValueError, match="different numbers of lines"):
        translator.translate_file(src, out, prefix)
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"gut\nschlecht \xff\n")
    with pytest.raises(ValueError, match="line 2 is not valid UTF-8"):
        translator.translate_file(bad, out)
    with pytest.raises(FileNotFoundError):
        translator.translate_file(tmp_path / "missing.de", out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.de", "in.de", "out.en", "prefix.en"]  # no temporaries
    link = tmp_path / "link.en"  # a link's file is written, the link kept
    os.symlink(out, link)
    os.chmod(out, 0o640)
    translator.translate_file(src, link, beam_size=2)
    assert os.path.islink(link) and out.read_text(encoding="utf-8").split("\n")[:-1] == want
    assert os.stat(out).st_mode & 0o777 == 0o640


def test_score_iterable_and_unloading(trained, sample):
    translator = torchmt.Translator(trained[0], compute_type="float32")
    src, tgt = sample[0][:25], sample[1][:25]
    lazy = list(translator.score_iterable(iter(src), (t + "\n" for t in tgt), buffer_size=6))
    # (other batches than one of 25: the same sums but for float rounding)
    assert [r.log_prob for r in lazy] == pytest.approx([r.log_prob for r in translator.score_batch(src, tgt)], abs=1e-4)
    assert [r.tokens for r in lazy] == [r.tokens for r in translator.score_batch(src, tgt)]
    with pytest.raises(ValueError, match="target ended after 24 entries"):
        list(translator.score_iterable(iter(src), iter(tgt[:24]), buffer_size=6))
    with pytest.raises(ValueError, match="source ended after 25 entries"):
        list(translator.score_iterable(iter(src), iter(tgt + ["x"]), buffer_size=5))
    want = translator.translate_batch(src[:3])
    assert translator.model_is_loaded and translator.num_translators == 1
    translator.unload_model()
    assert not translator.model_is_loaded
    with pytest.raises(RuntimeError, match="unloaded"):
        translator.translate_batch(src[:3])
    translator.load_model()
    assert [r.hypotheses for r in translator.translate_batch(src[:3])] == [r.hypotheses for r in want]
    with pytest.raises(ValueError, match="to_cpu"):
        translator.unload_model(to_cpu=True)


class _Spy:
    """Forwards to `inner`, except the methods given."""

    def __init__(self, inner, **methods):
        self._inner, self._methods = inner, methods

    def __getattr__(self, name):
        return self._methods.get(name) or getattr(self._inner, name)


def translate_from_four_threads(translator, lines):
    """4 threads share `translator`, each translating `lines` 3 times: their last outputs, the
    errors they met, and how often this thread ran while they worked (1 ms ticks)."""
    outputs, errors = [None] * 4, []

    def call(i):
        try:
            for _ in range(3):
                outputs[i] = [r.hypotheses[0] for r in translator.translate_batch(lines, max_batch_size=8)]
        except Exception as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    ticks = 0
    while any(t.is_alive() for t in threads):
        ticks += 1
        time.sleep(0.001)
    for t in threads:
        t.join()
    return outputs, errors, ticks


def test_threads_share_the_translator_and_leave_the_host_alone(trained, sample):
    torch.set_num_threads(3)
    environ = dict(os.environ)
    handler = signal.getsignal(signal.SIGINT)
    translator = torchmt.Translator(trained[0], compute_type="float32", inter_threads=2, intra_threads=1)
    lines = sample[0][:40]
    expected = [r.hypotheses[0] for r in translator.translate_batch(lines, max_batch_size=8)]
    outputs, errors, ticks = translate_from_four_threads(translator, lines)
    assert not errors
    assert all(out == expected for out in outputs)
    assert ticks > 0  # the GIL is released: this thread kept running Python while they translated
    assert torch.get_num_threads() == 3
    seen_in_new_thread = []
    t = threading.Thread(target=lambda: seen_in_new_thread.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert seen_in_new_thread == [3]
    assert dict(os.environ) == environ
    assert signal.getsignal(signal.SIGINT) is handler


def test_each_translator_runs_under_its_own_runtime(trained, sample):
    model, lines = trained[0], sample[0][:30]
    default = torchmt.Translator(model, compute_type="float32")
    # The screen and the sparse input change the arithmetic, never the tokens (kernels/runtime.h).
    plain = torchmt.Translator(model, compute_type="float32",
                               runtime={"screened_argmax": False, "sparse_input": False, "packed_gemm": "aten"})
    expected = [r.hypotheses[0] for r in default.translate_batch(lines, max_batch_size=8)]
    assert [r.hypotheses[0] for r in plain.translate_batch(lines, max_batch_size=8)] == expected
    portable = torchmt.Translator(model, compute_type="float32", runtime={"cpu_isa": "portable"})
    assert len(portable.translate_batch(lines[:3])) == 3
    with pytest.raises(ValueError, match="no setting 'threads'"):
        torchmt.Translator(model, runtime={"threads": 2})
    with pytest.raises(TypeError, match="screened_beam.*bool"):
        torchmt.Translator(model, runtime={"screened_beam": "no"})
    with pytest.raises(ValueError, match="avx9"):
        torchmt.Translator(model, runtime={"cpu_isa": "avx9"})
    with pytest.raises(ValueError, match="packed_gemm"):
        torchmt.Translator(model, runtime={"packed_gemm": "blas"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_translates_on_a_gpu_as_on_the_cpu(trained, sample):
    model, lines = trained[0], sample[0][:40]
    cpu = torchmt.Translator(model, compute_type="float32")
    gpu = torchmt.Translator(model, device="cuda", compute_type="float32", inter_threads=2)
    assert gpu.device.startswith("cuda") and gpu.compute_type == "fp32"
    for beam in (1, 4):
        want = [r.hypotheses[0] for r in cpu.translate_batch(lines, beam_size=beam, max_batch_size=8)]
        got = [r.hypotheses[0] for r in gpu.translate_batch(lines, beam_size=beam, max_batch_size=8)]
        # Other kernels, other roundings: a near tie may go the other way on a line or two.
        assert sum(g == w for g, w in zip(got, want)) >= len(lines) - 2, list(zip(got, want))
    expected = [r.hypotheses[0] for r in gpu.translate_batch(lines, max_batch_size=8)]
    outputs, errors, _ = translate_from_four_threads(gpu, lines)
    assert not errors and all(out == expected for out in outputs)
    line = lines[0]
    assert [s.token for s in gpu.generate_tokens(line)] == \
        gpu.translate_batch([gpu.tokenize(line)])[0].hypotheses[0]
    targets = [r.hypotheses[0] for r in cpu.translate_batch(lines[:10])]
    on_cpu, on_gpu = cpu.score_batch(lines[:10], targets), gpu.score_batch(lines[:10], targets)
    assert all(abs(c.log_prob - g.log_prob) < 1e-3 * (1 + abs(c.log_prob)) for c, g in zip(on_cpu, on_gpu))
    for compute_type in ("bfloat16", "float16"):
        half = torchmt.Translator(model, device="cuda", compute_type=compute_type)
        got = [r.hypotheses[0] for r in half.translate_batch(lines, max_batch_size=8)]
        assert sum(g == w for g, w in zip(got, expected)) >= len(lines) // 2, (compute_type, got)
    with pytest.raises(ValueError, match="int8 runs on the CPU"):
        torchmt.Translator(model, device="cuda", compute_type="int8")
    assert torchmt.Translator(model, device="auto", compute_type="int8").device == "cpu"


INTERRUPT_TRANSLATION = r"""
import sys, torchmt
translator = torchmt.Translator(sys.argv[1], compute_type="float32")
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
def forever():
    while True:
        yield from lines
count = 0
try:
    for r in translator.translate_iterable(forever(), buffer_size=64):
        count += 1
        if count == 64:
            print("started", flush=True)
except KeyboardInterrupt:
    print("interrupted after", count, flush=True)
    sys.exit(3)
"""


def test_ctrl_c_interrupts_translation(trained):
    from conftest import SOURCE_DIR

    p = run_python(INTERRUPT_TRANSLATION, trained[0], os.path.join(SOURCE_DIR, "data", "sample.de"))
    assert p.stdout.readline().strip() == "started"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, err
    assert out.startswith("interrupted after"), out


INTERRUPT_ONE_BATCH = r"""
import sys, time, torchmt
translator = torchmt.Translator(sys.argv[1], compute_type="float32", intra_threads=1)
lines = open(sys.argv[2], encoding="utf-8").read().splitlines() * 2
one_batch = dict(beam_size=8, max_batch_size=len(lines))
start = time.monotonic()
translator.translate_batch(lines, **one_batch)
whole = time.monotonic() - start
print("started", flush=True)
start = time.monotonic()
try:
    translator.translate_batch(lines, **one_batch)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - start:.2f} s of a {whole:.2f} s batch", flush=True)
    sys.exit(3 if time.monotonic() - start < whole / 2 else 4)
"""


def test_ctrl_c_stops_a_batch_at_its_next_step(trained):
    # One call, one batch of beam search: Ctrl-C ends it within a step, not at the batch's end
    # (the whole batch's time, measured first in the same process, is the yardstick).
    from conftest import SOURCE_DIR

    p = run_python(INTERRUPT_ONE_BATCH, trained[0], os.path.join(SOURCE_DIR, "data", "sample.de"))
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, (out, err)


WITHOUT_TORCH_MODULE = r"""
import sys, torchmt
t = torchmt.Translator(sys.argv[1])
print(t.translate_batch(["Ein Hund läuft."])[0].hypotheses[0])
print("torch imported" if "torch" in sys.modules else "torch not imported", flush=True)
"""


def test_translates_without_importing_torchs_python_module(trained):
    # LibTorch's libraries come with the extension; torch's Python module would cost ~100 MiB more.
    p = run_python(WITHOUT_TORCH_MODULE, trained[0])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert out.splitlines()[-1] == "torch not imported", out


def test_the_extension_exports_its_entry_point_alone():
    # An exported inline template of the standard library (std::call_once's) was bound by a CUDA
    # LibTorch's oneDNN in place of its own copy: a crash in a program that did not import torch.
    import shutil

    from torchmt import _native

    if shutil.which("nm") is None:
        pytest.skip("no nm (binutils)")
    out = subprocess.run(["nm", "-D", "--defined-only", _native.__file__], capture_output=True, text=True,
                         check=True).stdout
    exported = [line.split()[-1] for line in out.splitlines() if line.split()[-2] in "TtWwDdBbVvuRr"]
    assert [s for s in exported if s not in ("_edata", "_end", "__bss_start")] == ["PyInit__native"], exported[:10]


INTERRUPT_TRAINING = r"""
import json, sys, torchmt
options = json.loads(sys.argv[1])
def progress(step, line):
    if step == 20:
        print("started", flush=True)
try:
    torchmt.train(on_progress=progress, **options)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_stops_training_with_a_checkpoint_that_resumes(tmp_path):
    import json

    out = str(tmp_path / "run")
    options = train_options(out, max_steps=100000, log_every=1)
    p = run_python(INTERRUPT_TRAINING, json.dumps(options))
    assert p.stdout.readline().strip() == "started"
    p.send_signal(signal.SIGINT)
    stdout, err = p.communicate(timeout=300)
    assert p.returncode == 3, err
    assert "interrupted" in stdout
    assert os.path.exists(os.path.join(out, "checkpoint_last.pt"))
    summary = torchmt.train(**train_options(out, max_steps=25, resume=True))
    assert summary["steps"] >= 0 and not summary["interrupted"]


def test_errors_are_python_exceptions(trained, tmp_path):
    model = trained[0]
    with pytest.raises(FileNotFoundError, match="no-such.pt"):
        torchmt.Translator(str(tmp_path / "no-such.pt"))
    corrupt = tmp_path / "corrupt.pt"
    data = open(model, "rb").read()
    corrupt.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="corrupt.pt"):
        torchmt.Translator(str(corrupt))
    with pytest.raises(ValueError, match="compute_type"):
        torchmt.Translator(model, compute_type="int3")
    with pytest.raises(TypeError, match="inter_threads"):
        torchmt.Translator(model, inter_threads="2")
    translator = torchmt.Translator(model, compute_type="float32")
    with pytest.raises(ValueError, match=r"source\[1\].*UTF-8"):
        translator.translate_batch(["gut", "schlecht \udcff"])
    with pytest.raises(TypeError, match="beam_size"):
        translator.translate_batch(["gut"], beam_size="5")
    with pytest.raises(ValueError, match="num_hypotheses"):
        translator.translate_batch(["gut"], beam_size=2, num_hypotheses=3)
    with pytest.raises(ValueError, match="target_prefix.*2.*got 1"):
        translator.translate_batch(["gut", "schlecht"], target_prefix=["A"])
    with pytest.raises(ValueError, match="sampling_topk"):
        translator.translate_batch(["gut"], sampling_topk=5, beam_size=2)
    with pytest.raises(TypeError, match="source"):
        translator.translate_batch("ein Satz")
    with pytest.raises(ValueError, match="no_such_option"):
        torchmt.train(no_such_option=1, out=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        torchmt.bleu(["a", "b"], ["a"])
    # Values that overflowed or crashed further down: a team of 100,000 threads (OpenMP's segfault),
    # a decoding limit beyond int64 (an empty translation), a length penalty whose power overflows
    # (every score 0), integers beyond C++'s (pybind11's message named no option).
    with pytest.raises(ValueError, match="intra_threads"):
        torchmt.Translator(model, inter_threads=1, intra_threads=100000)
    with pytest.raises(ValueError, match="max_len_a"):
        translator.translate_batch(["gut"], max_len_a=float("inf"))
    with pytest.raises(ValueError, match="length_penalty"):
        translator.translate_batch(["gut"], beam_size=2, length_penalty=float("inf"))
    with pytest.raises(ValueError, match="length_penalty"):
        translator.score_batch(["gut"], ["good"], length_penalty=float("nan"))
    with pytest.raises(ValueError, match="beam_size"):
        translator.translate_batch(["gut"], beam_size=2**70)
    with pytest.raises(ValueError, match="max_len_b"):
        translator.translate_batch(["gut"], max_len_b=2**63 - 1)
    with pytest.raises(TypeError, match="source"):
        next(translator.translate_iterable("ein Satz"))
    assert list(translator.generate_tokens("")) == []
    with pytest.raises(ValueError, match="'xyzzy' is not a piece"):
        translator.translate_batch([translator.tokenize("Ein Hund")], target_prefix=[["xyzzy", "\u2581The"]])
    odd = os.path.join(os.fsencode(str(tmp_path)), b"\xff\xfe.pt")  # a file name that is not UTF-8
    with open(odd, "wb") as f:
        f.write(open(model, "rb").read())
    assert torchmt.Translator(os.fsdecode(odd), compute_type="float32").translate_batch(["gut"])[0].hypotheses
    with pytest.raises(ValueError, match="NUL"):
        torchmt.train(train_src="a\0b", out=str(tmp_path / "nul"))


def test_numpy_numbers_are_numbers_and_bools_are_bools(trained):
    # Numbers a program computed with numpy are taken as Python's; a string is no bool
    # (return_scores="false" would have turned scores on).
    np = pytest.importorskip("numpy")
    translator = torchmt.Translator(trained[0], compute_type="float32", intra_threads=np.int64(1))
    want = translator.translate_batch(["Ein Hund läuft."], beam_size=2, length_penalty=0.5, return_scores=True)[0]
    got = translator.translate_batch(["Ein Hund läuft."], beam_size=np.int64(2), length_penalty=np.float32(0.5),
                                     max_batch_size=np.int32(8), return_scores=np.bool_(True))[0]
    assert got.hypotheses == want.hypotheses and got.scores == pytest.approx(want.scores)
    for option in ("return_scores", "return_alignments", "early_exit"):
        with pytest.raises(TypeError, match=f"{option} must be a bool, not str"):
            translator.translate_batch(["gut"], **{option: "false"})
    with pytest.raises(TypeError, match="beam_size must be an int, not bool"):
        translator.translate_batch(["gut"], beam_size=np.bool_(True))
    with pytest.raises(TypeError, match="beam_size must be an int, not float64"):
        translator.translate_batch(["gut"], beam_size=np.float64(2))


def test_bleu_and_chrf_are_sacrebleus(sample):
    sacrebleu = pytest.importorskip("sacrebleu")
    hyps = [line.lower() for line in sample[1][:200]]
    refs = sample[1][:200]
    ours = torchmt.bleu(hyps, refs)
    theirs = sacrebleu.corpus_bleu(hyps, [refs])
    assert ours["text"] == str(theirs).split(" = ", 1)[0] + " = " + str(theirs).split(" = ", 1)[1]
    assert abs(ours["score"] - theirs.score) < 1e-9
    assert torchmt.chrf(hyps, refs)["text"] == str(sacrebleu.corpus_chrf(hyps, [refs]))


def test_documented():
    assert "inter_threads" in torchmt.Translator.__doc__
    assert "max_batch_size" in torchmt.Translator.translate_batch.__doc__
    assert os.path.exists(os.path.join(os.path.dirname(torchmt.__file__), "py.typed"))


def test_an_ensemble_of_paths_translates_and_refuses_wrong_weights(trained, sample):
    lines = sample[0][:8]
    single = torchmt.Translator(trained[0], compute_type="float32")
    ensemble = torchmt.Translator([trained[0], trained[0]], compute_type="float32", ensemble_weights=[0.3, 0.7])
    assert ensemble.model_path == [trained[0], trained[0]]
    # A model with itself is the model (the mean of one distribution, renormalised).
    one = single.score_batch(lines, [r.hypotheses[0] for r in single.translate_batch(lines)])
    two = ensemble.score_batch(lines, [r.hypotheses[0] for r in single.translate_batch(lines)])
    assert all(abs(a.log_prob - b.log_prob) < 1e-3 for a, b in zip(one, two))
    huge = torchmt.Translator([trained[0], trained[0]], compute_type="float32", ensemble_weights=[1e308, 1e308])
    assert [r.hypotheses for r in huge.translate_batch(lines)] == [r.hypotheses for r in single.translate_batch(lines)]
    with pytest.raises(ValueError, match="one weight per model"):
        torchmt.Translator([trained[0], trained[0]], ensemble_weights=[1.0])
    with pytest.raises(ValueError, match="positive"):
        torchmt.Translator([trained[0], trained[0]], ensemble_weights=[1.0, 0.0])
    with pytest.raises(TypeError):
        torchmt.Translator([])


def test_distill_teaches_a_student_with_the_teachers_translations(trained, sample, tmp_path):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("\n".join(sample[0][:40]) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(sample[1][:40]) + "\n", encoding="utf-8")
    out = str(tmp_path / "distilled")
    seen = []
    options = train_options(out, train_src=str(src), train_tgt=str(tgt), max_steps=5, vocab_size=None)
    summary = torchmt.distill(on_progress=lambda step, line: seen.append(line), teacher_model=[trained[0]],
                              teacher_dtype="fp32", teacher_threads=1, **options)
    assert not summary["interrupted"] and summary["teacher_lines"] == 40 and not summary["teacher_reused"]
    assert summary["student"]["steps"] == 5 and os.path.exists(summary["shortlist"])
    assert "teachers: 40 of 40 lines saved" in seen
    teacher = torchmt.Translator(trained[0], compute_type="float32")
    want = [r.hypotheses[0] for r in teacher.translate_batch(sample[0][:40], beam_size=5, length_penalty=1.5,
                                                             max_batch_size=64)]
    with open(summary["teacher_tgt"], encoding="utf-8") as f:
        assert [line.rstrip("\n") for line in f] == want
    again = torchmt.distill(teacher_model=[trained[0]], teacher_dtype="fp32", teacher_threads=1, **options)
    assert again["teacher_reused"] and again["student"]["steps"] == 0 and again["back_lines"] == 0
    with pytest.raises(ValueError, match="teacher-model"):
        torchmt.distill(**options)
    # Back-translation needs a teacher that translates both ways; this one translates de -> en only.
    with pytest.raises(ValueError, match="both-directions"):
        torchmt.distill(teacher_model=[trained[0]], teacher_dtype="fp32", teacher_threads=1, back_translate=True,
                        **dict(options, out=str(tmp_path / "back")))


@pytest.fixture(scope="module")
def backward_model(tmp_path_factory, sample):
    """An English->German tiny model (the filter's backward direction), 300 steps on the sample."""
    from conftest import SOURCE_DIR
    en = os.path.join(SOURCE_DIR, "data", "sample.en")
    de = os.path.join(SOURCE_DIR, "data", "sample.de")
    out = str(tmp_path_factory.mktemp("ende") / "run")
    torchmt.train(**train_options(out, train_src=en, train_tgt=de, valid_src=en, valid_tgt=de, max_steps=300,
                                  validate_every=300))
    return os.path.join(out, "checkpoint_best.pt")


def test_filter_corpus_keeps_what_the_cli_keeps(trained, backward_model, binary, sample, tmp_path):
    de, en = sample
    targets = en[:40] + [en[(i + 17) % 60] for i in range(40, 50)]  # the last ten: another sentence's
    (tmp_path / "c.de").write_text("".join(x + "\n" for x in de[:50]), encoding="utf-8")
    (tmp_path / "c.en").write_text("".join(x + "\n" for x in targets), encoding="utf-8")
    forward = torchmt.Translator(trained[0], compute_type="float32")
    backward = torchmt.Translator(backward_model, compute_type="float32")
    report = torchmt.filter_corpus(forward, backward, tmp_path / "c.de", tmp_path / "c.en", tmp_path / "k.de",
                                   tmp_path / "k.en", keep_fraction=0.8, scores=tmp_path / "s.tsv")
    assert report["pairs"] == 50 and report["kept"] == 40 and report["dropped_by_score"] == 10
    assert report["summary"].startswith("kept 40 of 50 pairs")
    r = subprocess.run([binary, "filter", "-q", "-m", trained[0], "--backward-model", backward_model, "--dtype", "fp32",
                        "--device", "cpu",
                        "--src", str(tmp_path / "c.de"), "--tgt", str(tmp_path / "c.en"), "--kept-src",
                        str(tmp_path / "cli.de"), "--kept-tgt", str(tmp_path / "cli.en"), "--keep-fraction", "0.8",
                        "--scores", str(tmp_path / "cli.tsv")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.de").read_text() == (tmp_path / "cli.de").read_text()
    assert (tmp_path / "k.en").read_text() == (tmp_path / "cli.en").read_text()
    ours = [float(line.split("\t")[0]) for line in (tmp_path / "s.tsv").read_text().splitlines()]
    theirs = [float(line.split("\t")[0]) for line in (tmp_path / "cli.tsv").read_text().splitlines()]
    assert len(ours) == 50 and all(abs(a - b) <= 1e-4 for a, b in zip(ours, theirs))
    assert report["summary"] in r.stderr  # what is dropped and why: tests/filter_test.cpp, with models that can tell
    # Re-pairing the dropped: the same pairs as the CLI's --realign.
    report = torchmt.filter_corpus(forward, backward, tmp_path / "c.de", tmp_path / "c.en", tmp_path / "k.de",
                                   tmp_path / "k.en", keep_fraction=0.8, realign=True, realign_candidates=5,
                                   realigned=tmp_path / "r.tsv")
    r = subprocess.run([binary, "filter", "-q", "-m", trained[0], "--backward-model", backward_model, "--dtype", "fp32",
                        "--device", "cpu", "--src", str(tmp_path / "c.de"), "--tgt", str(tmp_path / "c.en"),
                        "--kept-src", str(tmp_path / "cli.de"), "--kept-tgt", str(tmp_path / "cli.en"),
                        "--keep-fraction", "0.8", "--realign", "--realign-candidates", "5", "--realigned",
                        str(tmp_path / "cli.tsv")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "r.tsv").read_text().splitlines()
    assert report["realigned"] == len(rows) > 0 and report["kept"] == 40 and report["wrong_language"] == 0
    assert len((tmp_path / "k.de").read_text().splitlines()) == 40 + len(rows)
    assert rows == (tmp_path / "cli.tsv").read_text().splitlines()
    assert (tmp_path / "k.en").read_text() == (tmp_path / "cli.en").read_text()
    # Contrasted: the CLI's scores, each exp(D_f + D_b).
    torchmt.filter_corpus(forward, backward, tmp_path / "c.de", tmp_path / "c.en", tmp_path / "k.de",
                          tmp_path / "k.en", keep_fraction=0.8, contrast=True, scores=tmp_path / "s.tsv")
    r = subprocess.run([binary, "filter", "-q", "-m", trained[0], "--backward-model", backward_model, "--dtype", "fp32",
                        "--device", "cpu", "--src", str(tmp_path / "c.de"), "--tgt", str(tmp_path / "c.en"),
                        "--kept-src", str(tmp_path / "cli.de"), "--kept-tgt", str(tmp_path / "cli.en"),
                        "--keep-fraction", "0.8", "--contrast", "--scores", str(tmp_path / "cli.tsv")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ours = [[float(x) for x in line.split("\t")] for line in (tmp_path / "s.tsv").read_text().splitlines()]
    theirs = [[float(x) for x in line.split("\t")] for line in (tmp_path / "cli.tsv").read_text().splitlines()]
    assert len(ours) == 50 and all(abs(a[0] - b[0]) <= 1e-4 * max(1.0, b[0]) for a, b in zip(ours, theirs))
    assert all(abs(s - math.exp(f + b)) <= 1e-4 * max(1.0, s) for s, f, b in ours)
    assert (tmp_path / "k.en").read_text() == (tmp_path / "cli.en").read_text()
    # Length bounds (every pair within the score): the CLI's pairs and counts, the bounds in the report.
    report = torchmt.filter_corpus(forward, backward, tmp_path / "c.de", tmp_path / "c.en", tmp_path / "k.de",
                                   tmp_path / "k.en", keep_fraction=1.0, length_quantile=0.1)
    r = subprocess.run([binary, "filter", "-q", "-m", trained[0], "--backward-model", backward_model, "--dtype", "fp32",
                        "--device", "cpu", "--src", str(tmp_path / "c.de"), "--tgt", str(tmp_path / "c.en"),
                        "--kept-src", str(tmp_path / "cli.de"), "--kept-tgt", str(tmp_path / "cli.en"),
                        "--keep-fraction", "1", "--length-quantile", "0.1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    low, high = report["length_bounds"]
    assert 0 < low < high and report["dropped_by_score"] == 0 and 0 < report["dropped_by_length"] < 50
    assert report["kept"] == 50 - report["dropped_by_length"] and report["summary"] in r.stderr
    assert (tmp_path / "k.en").read_text() == (tmp_path / "cli.en").read_text()


def test_filter_corpus_errors(trained, backward_model, tmp_path):
    (tmp_path / "c.de").write_text("Ein Hund.\nZwei Katzen.\n", encoding="utf-8")
    (tmp_path / "c.en").write_text("A dog.\n", encoding="utf-8")
    forward = torchmt.Translator(trained[0], compute_type="float32")
    backward = torchmt.Translator(backward_model, compute_type="float32")
    args = (tmp_path / "c.de", tmp_path / "c.en", tmp_path / "k.de", tmp_path / "k.en")
    with pytest.raises(RuntimeError, match="line counts differ"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0)
    with pytest.raises(ValueError, match="give one of --max-score"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0, keep_fraction=0.5)
    with pytest.raises(ValueError, match="--length-quantile must be in"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0, length_quantile=0.5)
    with pytest.raises(FileNotFoundError):
        torchmt.filter_corpus(forward, backward, tmp_path / "missing.de", *args[1:], max_score=2.0)
    with pytest.raises(TypeError):
        torchmt.filter_corpus(trained[0], backward, *args, max_score=2.0)
    with pytest.raises(TypeError, match="realign must be a bool"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0, realign="yes")
    with pytest.raises(TypeError, match="language_check must be a bool"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0, language_check=0)
    with pytest.raises(TypeError, match="contrast must be a bool"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0, contrast="on")
    with pytest.raises(ValueError, match="--realigned writes what --realign re-paired"):
        torchmt.filter_corpus(forward, backward, *args, max_score=2.0, realigned=tmp_path / "r.tsv")
    (tmp_path / "c.en").write_text("A dog.\nTwo cats.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="backward does not translate --tgt into --src"):
        torchmt.filter_corpus(forward, forward, *args, max_score=2.0)
    assert not (tmp_path / "k.de").exists()


def test_reverse_weight_reranks_the_beam_as_the_cli(trained, backward_model, binary, sample):
    lines = sample[0][:6]
    forward = torchmt.Translator(trained[0], compute_type="float32")
    backward = torchmt.Translator(backward_model, compute_type="float32")
    options = dict(beam_size=3, num_hypotheses=2, length_penalty=1.0, return_scores=True)
    ours = forward.translate_batch(lines, reverse_weight=0.5, reverse_translator=backward, **options)
    # By hand: the whole beam, each hypothesis plus half the score of its source given it.
    beam = forward.translate_batch(lines, beam_size=3, num_hypotheses=3, length_penalty=1.0, return_scores=True)
    for line, mine, full in zip(lines, ours, beam):
        back = backward.score_batch(full.hypotheses, [line] * len(full.hypotheses), length_penalty=1.0)
        ranked = sorted(((s + 0.5 * b.score, h) for h, s, b in zip(full.hypotheses, full.scores, back)),
                        key=lambda x: -x[0])
        assert mine.hypotheses == [h for _, h in ranked[:2]]
        assert all(abs(a - s) < 1e-3 for a, (s, _) in zip(mine.scores, ranked))
    cli = cli_translate(binary, trained[0], lines, "--dtype", "fp32", "--beam", "3", "--lenpen", "1.0",
                        "--reverse-weight", "0.5", "--reverse-model", backward_model)
    assert cli == [r.hypotheses[0] for r in ours]
    with pytest.raises(ValueError, match="both-directions"):
        forward.translate_batch(lines, beam_size=3, reverse_weight=0.5)
    with pytest.raises(ValueError, match="translates de to en, not en to de"):
        forward.translate_batch(lines, beam_size=3, reverse_weight=0.5, reverse_translator=forward)
    with pytest.raises(ValueError, match="beam_size must be at least 2"):
        forward.translate_batch(lines, reverse_weight=0.5, reverse_translator=backward)
    with pytest.raises(ValueError, match="reverse_weight must be"):
        forward.translate_batch(lines, beam_size=3, reverse_weight=-1, reverse_translator=backward)
    with pytest.raises(TypeError):
        forward.translate_batch(lines, beam_size=3, reverse_weight=0.5, reverse_translator="model.pt")


def test_clean_filters_each_part_with_models_trained_on_the_others(sample, tmp_path):
    src, tgt = tmp_path / "c.de", tmp_path / "c.en"
    src.write_text("\n".join(sample[0][:40]) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(sample[1][:40]) + "\n", encoding="utf-8")
    options = train_options(str(tmp_path / "out"), max_steps=60, validate_every=1000, batch_tokens=3000,
                            dropout=0.0, lr_factor=0.5)
    for key in ("train_src", "train_tgt"):
        del options[key]
    kept = dict(src=str(src), tgt=str(tgt), kept_src=str(tmp_path / "k.de"), kept_tgt=str(tmp_path / "k.en"),
                dropped=str(tmp_path / "d.tsv"), keep_fraction=0.75, language_check=False)
    seen = []
    summary = torchmt.clean(on_progress=lambda step, line: seen.append(line), **kept, **options)
    assert not summary["interrupted"] and summary["trained"] == 4 and summary["reused"] == 0
    assert summary["pairs"] == 40 and summary["kept"] == 30 and len(summary["thresholds"]) == 2
    assert any("fold 2 of 2, backward model: training" in line for line in seen)
    with open(tmp_path / "k.de", encoding="utf-8") as f:
        assert len(f.readlines()) == 30
    with open(tmp_path / "d.tsv", encoding="utf-8") as f:
        rows = [row.split("\t") for row in f]
    assert len(rows) == 10 and all(sample[0][int(r[0]) - 1] == r[5] for r in rows)
    again = torchmt.clean(**kept, **options)
    assert again["trained"] == 0 and again["reused"] == 4 and again["kept"] == 30
    with pytest.raises(ValueError, match="--folds must be at least 2"):
        torchmt.clean(folds=1, **kept, **options)
    with pytest.raises(ValueError, match="train_src"):
        torchmt.clean(train_src=str(src), **kept, **options)
    with pytest.raises(TypeError):
        torchmt.clean(folds={}, **kept, **options)
