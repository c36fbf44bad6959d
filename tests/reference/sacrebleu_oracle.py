#!/usr/bin/env python3
"""Test oracle for torchmt's BLEU and chrF: the sacrebleu package scores, we compare.

    sacrebleu_oracle.py corpus OUT_DIR          writes NAME.hyp / NAME.ref pairs, prints the NAMEs
    sacrebleu_oracle.py score HYP REF [...]     prints "PAIR<TAB>KEY<TAB>VALUE" lines per pair
    sacrebleu_oracle.py tokenize FILE           prints each line after sacreBLEU's 13a tokenizer

Files are read as the sacrebleu command line reads them (UTF-8, split on "\\n" only, rstrip()).
The corpus is varied on purpose: perturbed German and English sentences with umlauts, quotes,
numbers, HTML entities and odd whitespace; empty hypotheses; empty reference lines; a perfect
match; very short lines; a corpus with no matching n-gram at all; and perturbed copies of the
bundled real sample (data/sample.de, data/sample.en). Fixed seed: same files always.
"""
import os
import random
import sys

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacrebleu.utils import smart_open

GERMAN = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
    "Zwei junge Mädchen spielen am Strand, während ihre Mütter zuschauen.",
    "Die Straße ist 3,5 km lang und wurde 1999 für 12.000.000 € gebaut.",
    "„Das ist nicht mein Problem“, sagte er – und ging.",
    "Größere Gefäße müssen außerhalb des Gebäudes gelagert werden.",
    "Der Zug fährt um 10:45 Uhr ab (Gleis 7-9).",
    "Übrigens: Ärger, Öl und Übermut gehören nicht zusammen!",
    "Ein Hund springt über einen Baumstamm im Wald.",
    "Eine Frau in einem roten Kleid tanzt auf der Bühne.",
    "Kinder spielen Fußball auf einem staubigen Feld.",
    "Ist das dein Ernst?!",
    "Ja.",
    "Die Preise stiegen um 2,3 % auf 4.50 Dollar pro Stück.",
    "Er sagte: &quot;Ich komme morgen&quot; &amp; ging nach Hause.",
    "Ein älterer Mann sitzt auf einer Bank im Park und füttert Tauben.",
    "Zwei Männer in Anzügen schütteln sich die Hände.",
    "Das Café „Zur Linde“ öffnet um 8 Uhr.",
    "Mehrere Leute warten an einer Bushaltestelle im Regen.",
    "Die Ergebnisse (siehe Tabelle 2) sind eindeutig...",
    "Ein Radfahrer fährt durch eine enge Gasse.",
    "Sie kauft Äpfel, Birnen und Trauben auf dem Markt.",
    "Ein Junge mit Helm fährt Skateboard auf einer Rampe.",
    "Die Temperatur lag zwischen -5 und 10 Grad.",
    "Ein schwarzer Hund und ein gefleckter Hund kämpfen.",
    "E-Mail-Adressen wie max.mustermann@example.de sind ungültig?",
    "Ein Mann schläft in einem grünen Raum auf einem Sofa.",
    "Zwei Katzen\tschlafen\u00a0auf dem Fensterbrett.",
    "Eine Gruppe von Menschen steht vor einem Iglu.",
    "Ende.",
]

ENGLISH = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "Two young girls are playing on the beach while their mothers watch.",
    "The road is 3.5 km long and was built in 1999 for $12,000,000.",
    "\"That's not my problem,\" he said - and left.",
    "Larger containers must be stored outside the building.",
    "The train leaves at 10:45 a.m. (platform 7-9).",
    "By the way: anger, oil and exuberance don't belong together!",
    "A dog jumps over a log in the forest.",
    "A woman in a red dress dances on the stage.",
    "Children play soccer on a dusty field.",
    "Are you serious?!",
    "Yes.",
    "Prices rose by 2.3% to 4,50 dollars a piece.",
    "He said &quot;I'll come tomorrow&quot; &amp; went home; a &lt; b &gt; c.",
    "An older man sits on a bench in the park feeding pigeons.",
    "Two men in suits shake hands.",
    "The café \"Zur Linde\" opens at 8 o'clock.",
    "Several people wait at a bus stop in the rain.",
    "The results (see Table 2) are clear...",
    "A cyclist rides through a narrow alley.",
    "She buys apples, pears and grapes at the market.",
    "A boy wearing a helmet skateboards on a ramp.",
    "The temperature was between -5 and 10 degrees.",
    "A black dog and a spotted dog are fighting.",
    "E-mail addresses like john.doe@example.com are invalid?",
    "A man sleeping in a green room on a couch.",
    "Two cats\tsleep\u2009on the windowsill\u3000today.",
    "A group of people standing in front of an igloo.",
    "The end <skipped> here.",
]

FILLER = ["the", "a", "der", "die", "und", "and", "über", "Straße", "in", "of", ",", ".", "!", "quickly",
          "Mädchen", "dog", "Hund", "3.5", "1,000", "-", "\"", "(", ")", "&amp;", "naïve", "😀", "東京"]

DIACRITICS = str.maketrans({"ä": "a", "ö": "o", "ü": "u", "Ä": "A", "Ö": "O", "Ü": "U", "ß": "ss",
                            "„": "\"", "“": "\"", "é": "e", "–": "-"})


def perturb(rng, line, rate):
    """Word-level noise of the kind a weak translation shows."""
    words = line.split()
    out = []
    for i, w in enumerate(words):
        roll = rng.random()
        if roll < rate * 0.3:
            continue  # dropped
        if roll < rate * 0.5:
            out.append(rng.choice(FILLER))  # substituted
        elif roll < rate * 0.65:
            out.extend([w, w])  # repeated
        elif roll < rate * 0.8:
            out.append(w.lower() if rng.random() < 0.5 else w.upper())
        elif roll < rate and out:
            out.insert(len(out) - 1, w)  # swapped with the previous word
        else:
            out.append(w)
    return " ".join(out)


def make_corpus(out_dir):
    rng = random.Random(20240607)
    refs = GERMAN + ENGLISH
    pairs = {}  # name -> (hyps, refs)
    pairs["perfect"] = (list(refs), refs)
    pairs["light_noise"] = ([perturb(rng, r, 0.15) for r in refs], refs)
    pairs["heavy_noise"] = ([perturb(rng, r, 0.6) for r in refs], refs)
    pairs["some_empty_hyps"] = ([("" if i % 3 == 0 else perturb(rng, r, 0.2)) for i, r in enumerate(refs)], refs)
    pairs["all_empty_hyps"] = (["" for _ in refs], refs)
    pairs["empty_ref_lines"] = ([perturb(rng, r, 0.2) for r in refs],
                                [("" if i % 4 == 1 else r) for i, r in enumerate(refs)])
    short_refs = [" ".join(r.split()[:rng.randint(1, 3)]) for r in refs]
    pairs["very_short_lines"] = ([perturb(rng, r, 0.3) for r in short_refs], short_refs)
    pairs["single_words"] = ([r.split()[0] for r in refs], [r.split()[0] for r in refs])
    pairs["zero_matches"] = (["Xyzzy plugh" if i % 2 else "Quux" for i in range(len(refs))], refs)
    pairs["truncated"] = ([" ".join(r.split()[: max(1, len(r.split()) // 2)]) for r in refs], refs)
    pairs["too_long"] = ([r + " " + perturb(rng, r, 0.5) for r in refs], refs)
    pairs["lowercased"] = ([r.lower() for r in refs], refs)
    pairs["no_diacritics"] = ([r.translate(DIACRITICS) for r in refs], refs)
    pairs["html_entities"] = ([r.replace("\"", "&quot;").replace("&amp;", "&") for r in refs], refs)
    pairs["odd_whitespace"] = (["\u00a0" + r.replace(" ", rng.choice(["  ", "\t", " \u2028 ", "\u3000"])) + " \t"
                                for r in refs], refs)
    pairs["shuffled"] = (rng.sample(refs, len(refs)), refs)
    pairs["one_line_one_token"] = (["Ja"], ["Ja"])
    # Real files: the bundled 401-sentence phrasebook sample, in both languages.
    sample_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data")
    for lang in ("de", "en"):
        sample = os.path.join(sample_dir, f"sample.{lang}")
        if os.path.exists(sample):
            real = read(sample)
            pairs[f"sample_{lang}_perfect"] = (list(real), real)
            pairs[f"sample_{lang}_light_noise"] = ([perturb(rng, r, 0.15) for r in real], real)
            pairs[f"sample_{lang}_heavy_noise"] = ([perturb(rng, r, 0.5) for r in real], real)
            pairs[f"sample_{lang}_some_empty"] = ([("" if i % 5 == 0 else perturb(rng, r, 0.3))
                                                  for i, r in enumerate(real)], real)
    os.makedirs(out_dir, exist_ok=True)
    for name, (hyps, references) in pairs.items():
        for suffix, lines in (("hyp", hyps), ("ref", references)):
            with open(os.path.join(out_dir, f"{name}.{suffix}"), "w", encoding="utf-8", newline="\n") as f:
                f.writelines(line + "\n" for line in lines)
        print(name)


def read(path):
    with smart_open(path) as f:
        return [line.rstrip() for line in f]


def score(paths):
    if len(paths) % 2:
        sys.exit("score: expected HYP REF pairs")
    for k in range(0, len(paths), 2):
        hyps, refs = read(paths[k]), read(paths[k + 1])
        bleu, chrf = BLEU(), CHRF()
        b = bleu.corpus_score(hyps, [refs])
        c = chrf.corpus_score(hyps, [refs])
        pair = str(k // 2)
        for key, value in (("bleu", repr(b.score)), ("bleu_line", b.format()), ("chrf", repr(c.score)),
                           ("chrf_line", c.format()), ("bleu_signature", str(bleu.get_signature())),
                           ("chrf_signature", str(chrf.get_signature())), ("version", sacrebleu.__version__)):
            print(f"{pair}\t{key}\t{value}")


def tokenize(path):
    tokenizer = Tokenizer13a()
    for line in read(path):
        print(tokenizer(line))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"corpus": lambda: make_corpus(args[0]), "score": lambda: score(args), "tokenize": lambda: tokenize(args[0])}[command]()
