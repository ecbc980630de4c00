"""A corpus folder as the corpus builders write it (scripts/build_message_corpus.py, the paper
pipelines, scripts/distill.py): ``bin/`` (fairseq-preprocess output), the raw ``<split>.<lang>``
files (the BLEU references) and the subword model with its ``subword`` marker.  Turns hypotheses
back into plain text and scores them with sacreBLEU."""
from pathlib import Path

from scripts.lab.evaluation import EvaluationError


class Corpus:
    """The folder's language pair, references of ``subset`` and subword kind."""

    def __init__(self, folder, subset="test"):
        self.folder = Path(folder)
        self.bin = self.folder / "bin"
        if not self.bin.is_dir():
            raise EvaluationError(f"{self.bin} does not exist: build the corpus first "
                                  f"(python -m scripts.build_message_corpus --out {self.folder}) or pass --data")
        dicts = sorted(p.name[len("dict."):-len(".txt")] for p in self.bin.glob("dict.*.txt"))
        pairs = sorted({p.name.split(".")[1] for p in self.bin.glob(f"{subset}.*-*.*.bin")})
        if not pairs:
            raise EvaluationError(f"no binarized '{subset}' split in {self.bin}")
        self.src, self.tgt = pairs[0].split("-")
        assert self.src in dicts and self.tgt in dicts, (dicts, pairs)
        self.subset = subset
        ref = self.folder / f"{subset}.{self.tgt}"
        self.references = ref.read_text(encoding="utf-8").splitlines() if ref.exists() else None
        marker = self.folder / "subword"
        self.subword = marker.read_text().strip() if marker.exists() else "sentencepiece"
        if self.references is not None and not self.references:
            raise EvaluationError(f"the test set {ref} is empty: nothing to benchmark")

    def generate_args(self, beam=1, max_len=(0.0, 200)):
        """fairseq-generate's arguments that decode this corpus' split with ``beam`` and an output
        length of at most ``a * source length + b``."""
        return ["--gen-subset", self.subset, "--beam", str(beam), "--source-lang", self.src, "--target-lang", self.tgt,
                "--max-len-a", str(max_len[0]), "--max-len-b", str(max_len[1])]

    def detokenize(self, pieces):
        """Subword pieces (a string) -> plain text, undoing the corpus' own segmentation."""
        if self.subword == "sentencepiece":
            return pieces.replace(" ", "").replace("\u2581", " ").strip()
        text = pieces.replace("@@ ", "").replace("@@", "")
        from sacremoses import MosesDetokenizer  # only for subword-nmt corpora of the paper pipelines

        return MosesDetokenizer(lang=self.tgt).detokenize(text.split())

    def text(self, tgt_dict, tokens):
        """Target token ids (with EOS) -> detokenised text, the same way for every backend."""
        return self.detokenize(tgt_dict.string([t for t in tokens if t != tgt_dict.eos()]))

    def bleu_metric(self):
        """sacreBLEU's BLEU as every score of this corpus is taken (13a, or MeCab for Japanese)."""
        import sacrebleu

        return sacrebleu.metrics.BLEU(tokenize="ja-mecab" if self.tgt.startswith("ja") else "13a")

    def bleu(self, hypotheses, ids):
        """sacreBLEU of ``hypotheses`` against the references ``ids``: score, signature, brevity
        penalty and the hypothesis/reference length ratio (all None without references)."""
        if self.references is None:
            return dict(bleu=None, signature=None, bp=None, ratio=None)
        refs = [self.references[i] for i in ids]
        metric = self.bleu_metric()
        score = metric.corpus_score(hypotheses, [refs])
        return dict(bleu=round(score.score, 2), signature=str(metric.get_signature()), bp=round(score.bp, 4),
                    ratio=round(score.ratio, 4))
