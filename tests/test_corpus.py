"""scripts/build_message_corpus.py on a locale tree of .mo files written by the test itself."""
import struct

import pytest

from scripts import build_message_corpus
from scripts.lab.corpora import message_catalogs, offline_corpus


def write_mo(path, messages):
    """Minimal GNU .mo writer (the format gettext reads): header entry + sorted msgid/msgstr."""
    messages = dict(messages)
    messages[""] = "Content-Type: text/plain; charset=UTF-8\n"
    keys = sorted(messages)
    ids = [k.encode() for k in keys]
    strs = [messages[k].encode() for k in keys]
    n = len(keys)
    start = 7 * 4 + 16 * n
    offsets, blob = [], b""
    for s in ids + strs:
        offsets.append((len(s), start + len(blob)))
        blob += s + b"\0"
    header = struct.pack("Iiiiiii", 0x950412DE, 0, n, 7 * 4, 7 * 4 + 8 * n, 0, 0)
    table = b"".join(struct.pack("ii", *o) for o in offsets[:n]) + b"".join(struct.pack("ii", *o) for o in offsets[n:])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + table + blob)


def make_tree(root, n=40):
    de = {f"Cannot open file number {i}": f"Datei Nummer {i} kann nicht geöffnet werden" for i in range(n)}
    de.update({
        "%s: %d": "%s: %d",                      # placeholder-only: dropped
        "first line\nsecond line": "erste\nzweite",  # multi-line: dropped
        "Untranslated message": "Untranslated message",  # identical: dropped for en-xx
        "Cannot open file number 0 ": "doppelt",  # same source after normalisation: deduplicated
    })
    write_mo(root / "de" / "LC_MESSAGES" / "app.mo", de)
    pt = {f"File {i} saved": f"Ficheiro {i} guardado" for i in range(n)}
    br = {f"File {i} saved": f"Arquivo {i} salvo" for i in range(n)}
    write_mo(root / "pt_PT" / "LC_MESSAGES" / "app.mo", pt)
    write_mo(root / "pt_BR" / "LC_MESSAGES" / "app.mo", br)


def test_extract_filters_and_deduplicates(tmp_path):
    make_tree(tmp_path)
    pairs, stats = message_catalogs.extract_pairs(tmp_path, "en-de")
    sources = [s for s, _ in pairs]
    assert len(pairs) == 40 and len(set(sources)) == 40
    assert ("Cannot open file number 7", "Datei Nummer 7 kann nicht geöffnet werden") in pairs
    assert not any("%s" in s or "\n" in s or s == "Untranslated message" for s in sources)
    assert stats["filtered"] == 3


def test_pt_pair_uses_both_translations_of_the_same_message(tmp_path):
    make_tree(tmp_path)
    pairs, _ = message_catalogs.extract_pairs(tmp_path, "pt_PT-pt_BR")
    assert ("Ficheiro 3 guardado", "Arquivo 3 salvo") in pairs and len(pairs) == 40


def test_split_is_deterministic_and_disjoint(tmp_path):
    make_tree(tmp_path)
    pairs, _ = message_catalogs.extract_pairs(tmp_path, "en-de")
    a = offline_corpus.split(pairs, 5, 3)
    b = offline_corpus.split(list(reversed(pairs)), 5, 3)
    assert a == b
    assert [len(a[k]) for k in ("train", "valid", "test")] == [32, 3, 5]
    assert not set(a["test"]) & set(a["train"]) and not set(a["valid"]) & set(a["train"])


def test_full_build_writes_raw_subword_and_binarized(tmp_path):
    make_tree(tmp_path / "locale", n=120)
    out = tmp_path / "out"
    stats, sizes = build_message_corpus.main(["--pair", "en-de", "--locale-dir", str(tmp_path / "locale"),
                                              "--out", str(out), "--test-size", "10", "--valid-size", "10", "--vocab-size", "300"])
    assert sizes == {"train": 100, "valid": 10, "test": 10}
    assert (out / "test.de").read_text().count("\n") == 10
    assert (out / "spm.model").exists()
    for split in ("train", "valid", "test"):
        assert (out / "bin" / f"{split}.en-de.en.bin").exists()


def test_no_catalogs_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="(?s)no translated message catalogs.*apt-get install"):
        message_catalogs.extract_pairs(tmp_path, "en-de")


def test_too_few_pairs_is_a_clear_error(tmp_path):
    make_tree(tmp_path, n=5)
    pairs, _ = message_catalogs.extract_pairs(tmp_path, "en-de")
    with pytest.raises(SystemExit, match="only 5 pairs"):
        offline_corpus.split(pairs, 10, 10)
