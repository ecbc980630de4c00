#!/usr/bin/env python
"""DDGviz (Santilli et al. 2023 §3.5): Jacobi decoding of one sentence, rendered as the iteration
matrix and the decoding dependency graph.

    python -m scripts.ddgviz --path CKPT --data BIN --sentence-id 3 --out ddg.png [--html ddg.html]
    python -m scripts.ddgviz --path CKPT --data BIN --source "Open the file" --out ddg.png

``--source`` is encoded with the corpus' sentencepiece model (``BIN/../spm.model`` or ``--spm``).
"""
import argparse
from pathlib import Path

from scripts.lab.evaluation.generation import Generation


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="checkpoint (any fairseq transformer)")
    ap.add_argument("--data", required=True, help="binarized data folder (dictionaries, and the split)")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--sentence-id", type=int, help="sentence of --split to draw")
    group.add_argument("--source", help="raw source text to draw")
    ap.add_argument("--split", default="test")
    ap.add_argument("--spm", help="sentencepiece model for --source (default: DATA/../spm.model)")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--html", help="also write an HTML table")
    ap.add_argument("--max-len-b", type=int, default=200)
    args = ap.parse_args(argv)

    import torch

    from scripts.lab.viz.ddg import jacobi_trace, render_html, render_png

    loaded = Generation.from_checkpoint(args.path, args.data)
    model, task = loaded.models[0], loaded.task
    if args.source is not None:
        import sentencepiece as spm

        spm_path = Path(args.spm) if args.spm else Path(args.data).resolve().parent / "spm.model"
        if not spm_path.exists():
            ap.error(f"no sentencepiece model at {spm_path}; pass --spm")
        pieces = " ".join(spm.SentencePieceProcessor(model_file=str(spm_path)).encode(args.source, out_type=str))
        src = task.source_dictionary.encode_line(pieces, add_if_not_exist=False).long()
        sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src.unsqueeze(0),
                                                          "src_lengths": torch.tensor([src.numel()])}}
    else:
        ds = loaded.dataset(args.split)
        if not 0 <= args.sentence_id < len(ds):
            ap.error(f"--sentence-id must be in 0..{len(ds) - 1} for split {args.split}")
        sample = ds.collater([ds[args.sentence_id]])
    trace = jacobi_trace(model, task, sample, max_len_b=args.max_len_b)
    render_png(trace, args.out, task.target_dictionary)
    if args.html:
        render_html(trace, args.html, task.target_dictionary)
    print(f"source: {trace.source}\ngreedy: {' '.join(trace.tokens)}\n{trace.iterations} Jacobi iterations for "
          f"{len(trace.greedy)} tokens; fixed at iterations {trace.fixed_at}\nwrote {args.out}"
          + (f" and {args.html}" if args.html else ""))
    return trace


if __name__ == "__main__":
    main()
