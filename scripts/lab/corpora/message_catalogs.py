"""Parallel sentences from the system's translated gettext message catalogs
(``/usr/share/locale/<lang>/LC_MESSAGES/<domain>.mo``; docs/METHODS.md §5): the same English ``msgid``
translated into two languages, normalised, filtered (multi-line, placeholder-only, untranslated, length) and
deduplicated; and the message corpus built from them (``python -m scripts.build_message_corpus``)."""
import gettext
import re
import sys
from pathlib import Path

from scripts.lab.corpora.files import write_lines
from scripts.lab.corpora.offline_corpus import binarize, split, train_sentencepiece, train_subword_nmt


# pair name -> (source locale dirs, target locale dirs, fairseq language codes)
PAIRS = {
    "en-de": (None, ["de"], ("en", "de")),
    "ja-en": (["ja"], None, ("ja", "en")),
    "pt_PT-pt_BR": (["pt_PT", "pt"], ["pt_BR"], ("pt_PT", "pt_BR")),
}

# printf-style (%s, %1$d, %-10.3lf), python-style ({name}, %(name)s), shell-style ($VAR, ${VAR}).
_PLACEHOLDER = re.compile(r"%(\([^)]*\))?[-+ #0-9.$*]*[hlLqjzt]*[a-zA-Z%]|\{[^{}]*\}|\$\{?\w+\}?")
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_CATALOG_PACKAGE_HINT = (
    "Message catalogs ship with the programs themselves (e.g. Debian: apt-get install coreutils "
    "tar gettext-base; the 'locales' and 'language-pack-*' packages on Ubuntu). Check that "
    "/etc/dpkg/dpkg.cfg.d/ does not exclude /usr/share/locale (minimal Docker images do), or "
    "pass --locale-dir to a tree of <lang>/LC_MESSAGES/*.mo files."
)


def read_catalog(path):
    """msgid -> msgstr of one .mo file (singular forms only), via Python's gettext."""
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # the parsed .mo; gettext has no public accessor
    out = {}
    for key, value in catalog.items():
        if isinstance(key, tuple):  # plural entry: (msgid, n); keep the singular form
            key, n = key
            if n != 0:
                continue
        if key and value:  # "" is the header entry
            out[key] = value
    return out


def normalise(text):
    text = text.replace("\u00a0", " ")
    return re.sub(r"\s+", " ", text).strip()


def keep_message(text):
    """False for messages that are no sentence: multi-line, or nothing but placeholders/symbols."""
    if "\n" in text or "\r" in text or "\t" in text:
        return False
    return bool(_LETTER.search(_PLACEHOLDER.sub(" ", text)))


def collect(locale_dir, langs):
    """domain -> {msgid: msgstr} merged over the locale directories in ``langs`` (first wins)."""
    merged = {}
    for lang in langs:
        folder = Path(locale_dir) / lang / "LC_MESSAGES"
        for mo in sorted(folder.glob("*.mo")) if folder.is_dir() else []:
            try:
                entries = read_catalog(mo)
            except Exception as e:  # a corrupt .mo raises OSError/UnicodeDecodeError; skip it, keep the rest
                print(f"  skipping unreadable catalog {mo}: {e}", file=sys.stderr)
                continue
            domain = merged.setdefault(mo.stem, {})
            for k, v in entries.items():
                domain.setdefault(k, v)
    return merged


def extract_pairs(locale_dir, pair, max_words=80):
    src_langs, tgt_langs, _ = PAIRS[pair]
    src_cat = collect(locale_dir, src_langs) if src_langs else None
    tgt_cat = collect(locale_dir, tgt_langs) if tgt_langs else None
    side = src_cat if src_cat is not None else tgt_cat
    if not side or not any(side.values()):
        looked = ", ".join(str(Path(locale_dir) / lang / "LC_MESSAGES") for lang in (src_langs or tgt_langs))
        raise SystemExit(f"error: no translated message catalogs (*.mo) found in {looked}.\n{_CATALOG_PACKAGE_HINT}")

    stats = {"messages": 0, "filtered": 0}
    pairs = []
    domains = sorted(set(src_cat or {}) | set(tgt_cat or {}))
    for domain in domains:
        s_map = src_cat.get(domain, {}) if src_cat is not None else None
        t_map = tgt_cat.get(domain, {}) if tgt_cat is not None else None
        keys = sorted(set(s_map or t_map) if s_map is None or t_map is None else set(s_map) & set(t_map))
        for msgid in keys:
            src = s_map[msgid] if s_map is not None else msgid
            tgt = t_map[msgid] if t_map is not None else msgid
            stats["messages"] += 1
            src, tgt = normalise(src), normalise(tgt)
            english_side = src_langs is None or tgt_langs is None
            if (
                not (keep_message(msgid) and keep_message(src) and keep_message(tgt))
                or (english_side and src == tgt)  # untranslated message
                or len(src.split()) > max_words
                or len(tgt.split()) > max_words
                or max(len(src), len(tgt)) > 6 * max_words
            ):
                stats["filtered"] += 1
                continue
            pairs.append((src, tgt))
    # deduplicate: exact pairs first, then one translation per source (first in sorted order)
    seen, unique = set(), []
    for src, tgt in sorted(set(pairs)):
        if src not in seen:
            seen.add(src)
            unique.append((src, tgt))
    stats["unique"] = len(unique)
    return unique, stats


def build(args):
    """The message corpus of ``python -m scripts.build_message_corpus``'s arguments in ``args.out``: raw splits,
    the subword model, ``bin/``; returns (the extraction's counts, each split's size)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    langs = PAIRS[args.pair][2]
    print(f"[corpus] reading catalogs under {args.locale_dir} for {args.pair}", flush=True)
    pairs, stats = extract_pairs(args.locale_dir, args.pair, args.max_words)
    splits = split(pairs, args.test_size, args.valid_size)
    for name, rows in splits.items():
        for i, lang in enumerate(langs):
            write_lines(out / f"{name}.{lang}", [r[i] for r in rows])
    print(
        f"[corpus] {args.pair}: {stats['messages']} messages, {stats['filtered']} filtered, "
        f"{stats['unique']} unique pairs -> train {len(splits['train'])}, valid {len(splits['valid'])}, "
        f"test {len(splits['test'])}", flush=True,
    )
    if args.subword == "sentencepiece":
        size = train_sentencepiece(out, splits, langs, args.vocab_size)
        print(f"[corpus] sentencepiece joint vocabulary {size}: {out / 'spm.model'}", flush=True)
    else:
        train_subword_nmt(out, splits, langs, args.bpe_merges)
        print(f"[corpus] subword-nmt BPE {args.bpe_merges} merges: {out / 'bpe.codes'}", flush=True)
    with open(out / "subword", "w") as f:
        f.write(args.subword + "\n")
    if not args.no_binarize:
        binarize(out, langs, args.workers)
        print(f"[corpus] binarized: {out / 'bin'}", flush=True)
    return stats, {k: len(v) for k, v in splits.items()}
