"""Grammatical errors at GEC's rates (the GEC-like corpus, ``python -m scripts.build_gec_corpus``): a share of
sentences left correct, in the others each word edited with a probability, by one of GEC's common kinds (a
misspelling, a dropped or doubled word, an agreement-like suffix change, two neighbours swapped, a confused
article or preposition); every draw seeded by the seed, the copy number and the sentence."""
import hashlib
import random

from scripts.lab.corpora.typos import typo

ARTICLES = ("a", "an", "the")
PREPOSITIONS = ("in", "on", "at", "of", "for", "to", "with", "from", "by", "about")
EDIT_KINDS = ("spelling", "drop", "double", "suffix", "swap", "function_word")


def _suffix_change(word):
    """An agreement-like error: -s added or removed, -ed <-> -ing (None when the word has no such end)."""
    if not word.isalpha() or len(word) < 4:
        return None
    if word.endswith("ing"):
        return word[:-3] + "ed"
    if word.endswith("ed"):
        return word[:-2] + "ing"
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word + "s"



def _function_word(word, rng):
    lower = word.lower()
    for group in (ARTICLES, PREPOSITIONS):
        if lower in group:
            new = rng.choice([w for w in group if w != lower])
            return new.capitalize() if word[0].isupper() else new
    return None



def corrupt(sentence, seed, copy, correct_share, edit_rate):
    """One corrupted version of a correct sentence; returns (source, number of edits)."""
    rng = random.Random(hashlib.sha1(f"{seed}\t{copy}\t{sentence}".encode("utf-8")).hexdigest())
    words = sentence.split(" ")
    if rng.random() < correct_share:
        return sentence, 0
    out, edits, i = [], 0, 0
    while i < len(words):
        word = words[i]
        if rng.random() >= edit_rate:
            out.append(word)
            i += 1
            continue
        kind = rng.choice(EDIT_KINDS)
        changed = None
        if kind == "spelling":
            changed = [typo(word, rng)]
        elif kind == "drop" and len(words) > 1:
            changed = []
        elif kind == "double":
            changed = [word, word]
        elif kind == "suffix":
            new = _suffix_change(word)
            changed = [new] if new else None
        elif kind == "swap" and i + 1 < len(words):
            changed = [words[i + 1], word]
            i += 1
        elif kind == "function_word":
            new = _function_word(word, rng)
            changed = [new] if new else None
        if changed is None or changed == [word]:
            out.append(word)  # this word has no edit of that kind: left correct
        else:
            out.extend(changed)
            edits += 1
        i += 1
    return " ".join(out) if out else sentence, edits
