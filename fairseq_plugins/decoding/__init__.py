"""Decoding algorithms of the plugin (docs/METHODS.md §2), picked by ``FastTranslationTask.build_generator``.
Every module of the package, by the part of the decoding core it belongs to (``tests/test_layout.py``
checks that each is named here):

What every generator shares: the options and fairseq's rules
``options``     ``GenerationOptions``: fairseq's generation options read once, validated, ``max_len()``
``generation_options``  per generator, each fairseq option honoured, refused or a fallback
``logits_processors``  fairseq's rules on log-probs (NaN, PAD, unk, min_len, max_len, n-grams), one list
``hypotheses``  fairseq's hypothesis dicts (length-normalised score, positional scores)
``inference``   decode under torch.inference_mode, hand fairseq ordinary tensors back
``threads``     how many threads a CPU decode runs on (``--cpu-threads``)
``dedup``       n-gram deduplication of a reordered model's output (``--dedup-ngram``)

The model, run lean: what both kinds of generator call
``encoder``     the lean encoder pass, once per sentence
``step``        the lean decoder step: one incremental call over ``m`` new tokens per row
``projection``  products with weights laid out for them; ``WeightCheck``, the weights' fingerprints
``cache``       per-row KV-cache bookkeeping in preallocated buffers (cut back, drop rows)
``verifier``    one verification call of a stock fairseq transformer over ``[last token, draft]``
``model_parts`` a model's encoder pass, lean decoder step and first cache, for the beam searches

The beam searches
``search``      the beam searches' strategies, one protocol ``step(step, lprobs, scores)``, passed in
``lean_beam``   fairseq's beam search on the lean step (left-to-right models)
``multi_token_beam``  step-wise multi-word beam search for models trained in a generation order
``beam_rows``   row bookkeeping of both beam searches (prefix reorder, finalised slots, the one host read)

The draft-and-verify engine (greedy, ``--drafter``)
``engine``      the loop: named steps over the state below (drafters and acceptance rules plug in)
``engine_state``  ``Rows``, ``Run``, ``Verdict``, ``Synced``: the state the steps share
``scoring``     the verifier's columns: the processors, its own token, the acceptance rule
``column_schedule``  on a CPU, a call's columns projected chunk by chunk or all at once: priced per call
``acceptance``  exact / topk / min_block / gad_pp / all
``appending``   a verdict appended to the rows, cut at EOS and at max_len
``proposing``   when the drafter is asked and how wide its draft may be (the width policy's plan)
``width_policy``  the draft width: fixed, or ``plan()`` / ``record()`` adapted to what drafts achieve
``iteration_cost``  what an iteration costs on this device, timed while decoding
``draft_stats`` the counts of ``generator.stats``
``report``      the one-line summary of a run, from ``generator.stats``
``auto_generator``  ``--drafter auto``: one engine per candidate, a chooser per batch
``drafters``    none, jacobi (PJ, PGJ, HGJ), input_copy (IAD), blockwise, nar and shallow (GAD), auto,
                the length oracle; ``--acceptance all`` runs the drafter alone through the same loop
"""
