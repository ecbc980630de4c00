"""The benchmark's runners (``scripts/benchmark.py``): one row's decoder loaded once, with its batches
(every test sentence; the timed ones), decoding ``{sentence id: token ids}``, its decoder-call count
and a device sync for the clock.  ``FairseqRunner``: the row's arguments parsed by fairseq-generate's
own parser.  ``CTranslate2Runner``: the same checkpoint converted for CTranslate2, the absolute
CPU-speed anchor."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

from scripts.lab.evaluation import EvaluationError
from scripts.lab.evaluation.generation import PLUGIN_DIR, Generation


class FairseqRunner:
    """A row loaded as fairseq-generate loads it (:class:`Generation`), its batches (all sentences;
    the timed ones) and a count of decoder calls."""

    def __init__(self, corpus, checkpoint, row_args, beam, batch_size, device, fp16, threads, max_len=(0.0, 200),
                 timed_sentences=0):
        import torch

        torch.set_num_threads(threads)
        args = corpus.generate_args(beam, max_len) + ["--batch-size", str(batch_size)] + shlex.split(row_args)
        self.generation = Generation.from_generate_args(corpus.bin, checkpoint, args, device, fp16)
        self.models, self.generator, self.device = self.generation.models, self.generation.generator, device
        self.tgt_dict = self.generation.tgt_dict
        self.batches = self.generation.batches(corpus.subset, batch_size)
        self.timed_batches = (self.generation.batches(corpus.subset, batch_size, ids=range(timed_sentences))
                              if timed_sentences else self.batches)
        self.calls = 0
        # fairseq's EnsembleModel calls decoder.forward() directly (no hooks fire), but every decoder
        # pass, of any generator, runs its first layer through __call__: count those.
        decoder = self.models[0].decoder
        first = decoder.layers[0] if hasattr(decoder, "layers") else decoder
        first.register_forward_hook(self.count_call)

    def count_call(self, *_):
        self.calls += 1

    def stats(self):
        return dict(getattr(self.generator, "stats", {}) or {})

    def reset_stats(self):
        self.calls = 0
        if hasattr(self.generator, "reset_stats"):
            self.generator.reset_stats()

    def decode(self, batches):
        """Run the generator over ``batches``; returns {sentence id: token id list (with EOS)}."""
        return self.generation.decode(batches)

    def text(self, tokens, corpus):
        return corpus.text(self.tgt_dict, tokens)

    def model_calls(self):
        s = self.stats()
        return int(s["model_calls"]) if "model_calls" in s else self.calls

    def sync(self):
        if self.device != "cpu":
            import torch

            torch.cuda.synchronize()


def convert_to_ctranslate2(checkpoint, corpus, out_dir):
    from fairseq_plugins.compat import load_checkpoint

    out_dir = Path(out_dir)
    if (out_dir / "model.bin").exists() and out_dir.stat().st_mtime >= Path(checkpoint).stat().st_mtime:
        return out_dir
    load_checkpoint(checkpoint, mmap=True)  # the converter unpickles it unsafely: refused here if it would run code
    cmd = [str(Path(sys.executable).parent / "ct2-fairseq-converter"), "--model_path", str(checkpoint),
           "--data_dir", str(corpus.bin), "--source_lang", corpus.src, "--target_lang", corpus.tgt,
           "--user_dir", str(PLUGIN_DIR), "--output_dir", str(out_dir), "--force",
           "--unsafe_deserialization"]  # torch 2.13 refuses legacy pickles otherwise; our own checkpoint
    env = dict(os.environ, PYTHONPATH=str(Path(PLUGIN_DIR).parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise EvaluationError(f"CTranslate2 conversion failed:\n{proc.stderr[-3000:]}")
    return out_dir


class CTranslate2Runner:
    def __init__(self, corpus, checkpoint, beam, batch_size, device, threads, work_dir, max_len=(0.0, 200),
                 timed_sentences=0, compute_type="default"):
        import ctranslate2
        from fairseq.data import Dictionary, data_utils

        import fairseq_plugins  # noqa: F401

        model_dir = convert_to_ctranslate2(checkpoint, corpus, Path(work_dir) / (Path(checkpoint).parent.name + "_ct2"))
        self.translator = ctranslate2.Translator(str(model_dir), device=device, inter_threads=1, intra_threads=threads,
                                                 compute_type=compute_type)  # "int8": its quantized CPU path
        self.beam, self.device, self.max_len = beam, device, max_len
        src_dict = Dictionary.load(str(corpus.bin / f"dict.{corpus.src}.txt"))
        self.tgt_dict = Dictionary.load(str(corpus.bin / f"dict.{corpus.tgt}.txt"))
        data = data_utils.load_indexed_dataset(str(corpus.bin / f"{corpus.subset}.{corpus.src}-{corpus.tgt}.{corpus.src}"), src_dict)
        if data is None or len(data) == 0:
            raise EvaluationError(f"the {corpus.subset} split of {corpus.bin} is empty")
        sources = [(i, src_dict.string(data[i][:-1]).split()) for i in range(len(data))]
        sources.sort(key=lambda x: (len(x[1]), x[0]))  # sorted by source length, like fairseq
        self.batches = [sources[i:i + batch_size] for i in range(0, len(sources), batch_size)]
        timed = [x for x in sources if not timed_sentences or x[0] < timed_sentences]
        self.timed_batches = [timed[i:i + batch_size] for i in range(0, len(timed), batch_size)]
        self.calls = 0

    def decode(self, batches):
        out = {}
        for batch in batches:
            longest = max(len(s) for _, s in batch) + 1  # fairseq's max_len counts the source EOS
            results = self.translator.translate_batch(
                [s for _, s in batch], beam_size=self.beam, max_batch_size=len(batch),
                max_decoding_length=int(self.max_len[0] * longest + self.max_len[1]))
            for (sid, _), r in zip(batch, results):
                out[sid] = [self.tgt_dict.index(t) for t in r.hypotheses[0]] + [self.tgt_dict.eos()]
        return out

    def text(self, tokens, corpus):
        return corpus.text(self.tgt_dict, tokens)

    def stats(self):
        return {}

    def reset_stats(self):
        pass

    def model_calls(self):
        return None

    def sync(self):
        pass
