"""Decoding algorithms of the plugin (docs/METHODS.md §2), picked by ``FastTranslationTask.build_generator``.

``options``     ``GenerationOptions``: fairseq's generation options read once, validated, ``max_len()``
``generation_options``  per generator, each fairseq option honoured, refused or a fallback
``logits_processors``  fairseq's rules on log-probs (NaN, PAD, unk, min_len, max_len, n-grams), one list
``hypotheses``  fairseq's hypothesis dicts (length-normalised score, positional scores)
``search``      the beam searches' strategies, one protocol ``step(step, lprobs, scores)``
``model_parts`` a model's encoder pass, lean decoder step and first cache, for the beam searches
``lean_beam``   fairseq's beam search on the lean step (left-to-right models)
``multi_token_beam``  step-wise multi-word beam search for models trained in a generation order
``beam_rows``   row bookkeeping of both beam searches (prefix reorder, finalised slots, the one host read)
``engine``      the draft-and-verify loop (one loop; drafters and acceptance rules plug in)
``verifier``    one incremental call of a stock fairseq transformer over k new tokens
``cache``       per-row KV-cache bookkeeping on fairseq's incremental state (cut back, drop rows)
``acceptance``  exact / topk / min_block / gad_pp / all
``drafters``    none, jacobi (PJ, PGJ, HGJ), input_copy (IAD), blockwise, nar (GAD's drafter model);
                ``--acceptance all`` runs the drafter alone through the same engine loop (no verifier call)
``scoring``     the verifier's columns: the processors, its own token, the acceptance rule
``inference``   decode under torch.inference_mode, hand fairseq ordinary tensors back
"""
