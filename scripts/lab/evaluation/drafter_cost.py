"""Cost of one iteration of the shallow GAD drafter against one plain engine greedy step
(docs/METHODS.md §3, "Shallow drafter"), at batch 1, on random weights of the demo's size
(verifier transformer_fast_tiny: d=128, 3+3 layers; 8K vocabulary; drafter shallow_drafter_tiny).

* plain step: the engine's marginal cost per step (``--drafter none``): the time of decoding one
  sentence to ``--long`` steps minus to ``--short`` steps, over the difference (the encoder and the
  per-sentence setup cancel out);
* drafter iteration: ``observe`` (the verifier's K + 1 columns; with ``--verifier-features`` their
  hidden states stored) and ``propose`` (``--fresh`` newly accepted tokens appended to its cache, k
  mask slots, the first K projected onto the vocabulary, argmax), called as the engine calls them
  (with its host-side longest prefix), averaged over ``--iterations`` calls that follow one sentence
  (the per-batch ``begin`` is timed apart);
* the three are timed interleaved, ``--pairs`` times, in alternating order; medians are reported,
  of the thread's CPU time (one thread: other jobs on a shared machine do not inflate it), or of
  wall-clock time with ``--wall``.

    OMP_NUM_THREADS=1 python -m scripts.time_drafter_step --block 4 10 --layers 1 --draft-vocab 2000 \
        [--verifier-features [--no-encoder-attention]] [--count-ops]
"""
import argparse
import statistics
import time
from argparse import Namespace

import torch

from scripts.lab.evaluation.operations import operations

#: the thread's CPU time: on a shared machine, time other processes take from this one is not counted
#: (wall-clock time with --wall)
CLOCK = time.thread_time


def random_verifier(vocab, arch="transformer_fast_tiny"):
    """``(dictionary, model)``: a fairseq ``transformer`` of the architecture ``arch`` (a name of
    fairseq's architecture registry) with random weights, in eval mode, over a shared dictionary of
    ``vocab`` symbols (the specials included)."""
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from fairseq.models.transformer import TransformerModel

    import fairseq_plugins  # noqa: F401  (registration)

    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    args = Namespace(share_all_embeddings=True, max_source_positions=1024, max_target_positions=1024)
    ARCH_CONFIG_REGISTRY[arch](args)
    return d, TransformerModel.build_model(args, Namespace(source_dictionary=d, target_dictionary=d)).eval()


def build(vocab, layers, k, draft_vocab=0, ffn=512, width=None, features=False, encoder_attention=True):
    from fairseq_plugins.data.mask_dictionary import with_mask
    from fairseq_plugins.decoding.drafters.shallow import ShallowDrafter
    from fairseq_plugins.models.shallow_drafter import ShallowDrafterConfig, ShallowDrafterModel

    d, verifier = random_verifier(vocab)
    masked = with_mask(d)
    cfg = ShallowDrafterConfig(decoder_layers=layers, draft_vocab=draft_vocab, decoder_ffn_embed_dim=ffn,
                               verifier_features=features, no_encoder_attention=not encoder_attention)
    model = ShallowDrafterModel.build_model(cfg, Namespace(source_dictionary=masked, target_dictionary=masked))
    model.attach_verifier(verifier, initialise=True)
    if features:  # a trained W_f (random here): the zero start would cost the same, but say nothing
        torch.nn.init.normal_(model.decoder.verifier_feature_proj.weight, std=model.decoder.embed_dim ** -0.5)
    drafter = ShallowDrafter(model.eval(), width or k, k, len(d), d.pad(), verifier=verifier)
    return d, verifier, drafter


def time_plain(generator, verifier, sample):
    """A plain greedy decode of ``sample``; the generator's options forbid EOS before its max length
    (``min_len == max_len_b``): exactly max_len + 1 steps."""
    calls = generator.stats["model_calls"]
    t = CLOCK()
    generator.generate([verifier], sample)
    return CLOCK() - t, generator.stats["model_calls"] - calls


def time_drafter(drafter, verifier, sample, d, iterations, fresh, max_len, count_ops=False):
    """``(seconds per iteration, begin seconds, encoder seconds)``; with ``count_ops`` the top-level
    torch operations of the iterations instead of their time (the inputs are made before either)."""
    from fairseq_plugins.decoding.drafters import DraftContext, StepResult

    net = sample["net_input"]
    t0 = CLOCK()
    enc = verifier.encoder.forward_torchscript(net)
    t1 = CLOCK()
    drafter.begin(DraftContext(net["src_tokens"], net["src_lengths"], max_len, max_len + 20, None, d.eos(), d.eos(),
                               d.pad(), encoder_out=enc))
    t2 = CLOCK()
    out = torch.randint(4, len(d), (1, max_len + 20))
    n_gen = [torch.tensor([i * fresh]) for i in range(iterations)]  # the engine's: already on hand
    cols = drafter.block + 1  # what the verifier reports: its columns (and their hidden states)
    top = torch.zeros(1, cols, dtype=torch.long)
    dim = drafter.model.decoder.embed_dim
    steps = [StepResult(draft=top[:, 1:], top=top, top_lprob=top.float(), accepted=torch.tensor([fresh - 1]),
                        count=torch.tensor([fresh]), n_before=n - fresh, out=out, hidden=torch.randn(1, cols, dim))
             for n in n_gen]
    def iterate():
        for i in range(iterations):
            if i:
                drafter.observe(steps[i])
            drafter.propose(out, n_gen[i], longest=i * fresh)  # the engine passes its host-side longest prefix

    if count_ops:
        return operations(iterate)[0]
    t3 = CLOCK()
    iterate()
    t4 = CLOCK()
    return (t4 - t3) / iterations, t2 - t1, t1 - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--block", type=int, nargs="+", default=[4, 10], help="k (= K, the draft width)")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--width", type=int, default=None, help="K: mask slots projected (default: all k)")
    p.add_argument("--ffn", type=int, default=512, help="the drafter's feed-forward width")
    p.add_argument("--draft-vocab", type=int, default=0, help="the drafter's output vocabulary (0: all)")
    p.add_argument("--pairs", type=int, default=15)
    p.add_argument("--long", type=int, default=120)
    p.add_argument("--short", type=int, default=20)
    p.add_argument("--iterations", type=int, default=25)
    p.add_argument("--fresh", type=int, default=2, help="tokens accepted per iteration (mean accepted)")
    p.add_argument("--verifier-features", action="store_true",
                   help="a drafter reading the verifier's hidden states (docs/METHODS.md §3)")
    p.add_argument("--no-encoder-attention", action="store_true",
                   help="a drafter without encoder attention (with --verifier-features: EAGLE's layer)")
    p.add_argument("--count-ops", action="store_true",
                   help="also count the top-level torch operations of a plain step and of a drafter iteration")
    p.add_argument("--wall", action="store_true", help="wall-clock time instead of the thread's CPU time")
    a = p.parse_args()
    if a.wall:
        global CLOCK
        CLOCK = time.perf_counter
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from fairseq_plugins.decoding.acceptance import Exact
    from fairseq_plugins.decoding.drafters import NoDraft
    from fairseq_plugins.decoding.engine import DraftVerifyGenerator
    from fairseq_plugins.decoding.options import GenerationOptions

    for k in a.block:
        d, verifier, drafter = build(a.vocab, a.layers, k, a.draft_vocab, a.ffn, a.width, a.verifier_features,
                                     not a.no_encoder_attention)
        src = torch.randint(4, a.vocab, (1, 15))
        src[0, -1] = d.eos()
        sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([15])}}
        # one plain generator per length: the options (and the logits processors built from them) are fixed at construction
        plain = {n: DraftVerifyGenerator([verifier], d, NoDraft(), Exact(),
                                         options=GenerationOptions(max_len_a=0.0, max_len_b=n, min_len=n))
                 for n in (a.long, a.short)}
        step, draft, begin = [], [], []
        with torch.inference_mode():
            for pair in range(a.pairs + 1):
                runs = [lambda: time_plain(plain[a.long], verifier, sample), lambda: time_plain(plain[a.short], verifier, sample),
                        lambda: time_drafter(drafter, verifier, sample, d, a.iterations, a.fresh, a.long)]
                res = {i: runs[i]() for i in (range(3) if pair % 2 else reversed(range(3)))}
                (tl, cl), (ts, cs), (td, tb, _) = res[0], res[1], res[2]
                if cl - cs != a.long - a.short:  # each plain decode must run to its max length, no earlier EOS
                    raise RuntimeError(f"plain decodes took {cl} and {cs} calls, not {a.long + 1} and {a.short + 1}")
                if pair:  # the first pair warms up
                    step.append((tl - ts) / (cl - cs))
                    draft.append(td)
                    begin.append(tb)
        s, dr = statistics.median(step), statistics.median(draft)
        ratios = sorted(x / y for x, y in zip(draft, step))
        q = len(ratios) // 4
        print(f"k={k} K={a.width or k} layers={a.layers} ffn={a.ffn} V={a.vocab} draft vocab {a.draft_vocab or 'all'} fresh={a.fresh}"
              f"{' verifier features' if a.verifier_features else ''}"
              f"{' no encoder attention' if a.no_encoder_attention else ''}: "
              f"plain engine step {s * 1e3:.3f} ms, drafter iteration {dr * 1e3:.3f} ms = {dr / s:.2f} of a step "
              f"(per-pair ratios: median {statistics.median(ratios):.2f}, quartiles {ratios[q]:.2f}-{ratios[-q - 1]:.2f}); "
              f"drafter begin (per batch) {statistics.median(begin) * 1e3:.3f} ms")
        if a.count_ops:  # differences: the encoder, the set-up and the first call cancel out
            with torch.inference_mode():
                (long_ops, (_, cl)), (short_ops, (_, cs)) = (
                    operations(lambda: time_plain(plain[n], verifier, sample)) for n in (a.long, a.short))
                once, twice = (time_drafter(drafter, verifier, sample, d, n, a.fresh, a.long, count_ops=True)
                               for n in (a.iterations, 2 * a.iterations))
            print(f"k={k}: operations per plain engine step {(long_ops - short_ops) / (cl - cs):.1f}, "
                  f"per drafter iteration {(twice - once) / a.iterations:.1f}")


if __name__ == "__main__":
    main()
