"""``ReorderedLanguagePairDataset``: a language-pair dataset whose batches carry the target in a
generation order (docs/METHODS.md §1), for training and validating multi-token decoders.

``collater`` turns fairseq's batch into

* ``target``: the reordered target (generation order, end markers included, length a multiple
  of z) -- what the criterion scores;
* ``net_input.prev_output_tokens``: the target shifted right by z, with z start symbols (EOS, as
  fairseq starts its decoder with EOS) in front (IBDecoder footnote 3); the model tells the z start
  slots apart by its start-slot embedding (``OrderEmbedding``), and derives the order's positions
  and directions (Eq. 5/7/10) from the slot index;
* ``natural_target``: fairseq's own natural-order target (with EOS).  ``fairseq-generate`` prints
  and scores ``sample['target']``; ``FastTranslationTask.inference_step`` puts the natural copy
  back there after decoding, so T- lines and BLEU use the natural reference.

Everything else (sizes, batching, filtering, ``src``/``tgt`` attributes) is the wrapped dataset's.
"""
import torch
from fairseq.data import BaseWrapperDataset, data_utils


class ReorderedLanguagePairDataset(BaseWrapperDataset):
    def __init__(self, dataset, order):
        super().__init__(dataset)
        self.order = order
        tgt_dict = getattr(dataset, "tgt_dict", None)
        self.eos = tgt_dict.eos() if tgt_dict is not None else 2
        self.pad = tgt_dict.pad() if tgt_dict is not None else 1

    def __getattr__(self, name):  # src, tgt, tgt_dict, buckets, ... of the wrapped dataset
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if not batch or batch.get("target") is None:
            return batch
        rows = [self._strip(row) for row in batch["target"]]
        reordered = [self.order.reorder(row, eos=self.eos) for row in rows]
        tokens = [r[0] for r in reordered]
        z = self.order.z
        starts = torch.full((z,), self.eos, dtype=torch.long)
        batch["natural_target"] = batch["target"]
        batch["target"] = data_utils.collate_tokens(tokens, self.pad)
        batch["ntokens"] = sum(len(t) for t in tokens)
        net_input = batch["net_input"]
        net_input["prev_output_tokens"] = data_utils.collate_tokens(
            [torch.cat([starts, t[:-z]]) for t in tokens], self.pad)
        return batch

    def _strip(self, row):
        """Natural target ids without padding and without the final EOS."""
        row = row[row.ne(self.pad)]
        return row[:-1] if len(row) and row[-1] == self.eos else row
