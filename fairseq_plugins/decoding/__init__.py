"""Decoding algorithms of the plugin (docs/METHODS.md §2), picked by ``FastTranslationTask.build_generator``.

``multi_token_beam``  step-wise multi-word beam search for models trained in a generation order
``beam_rows``   row bookkeeping of both beam searches (prefix reorder, finalised slots, the one host read)
``engine``      the draft-and-verify loop (one loop; drafters and acceptance rules plug in)
``verifier``    one incremental call of a stock fairseq transformer over k new tokens
``cache``       per-row KV-cache bookkeeping on fairseq's incremental state (cut back, drop rows)
``acceptance``  exact / topk / min_block / gad_pp / all
``drafters``    none, jacobi (PJ, PGJ, HGJ), input_copy (IAD), blockwise, nar (GAD's drafter model);
                ``--acceptance all`` runs the drafter alone through the same engine loop (no verifier call)
``constraints`` fairseq's greedy constraints (NaN, PAD, unk, min_len, max_len) on log-probs of many steps
``scoring``     the verifier's columns: constraints, its own token, the acceptance rule
``inference``   decode under torch.inference_mode, hand fairseq ordinary tensors back
"""
