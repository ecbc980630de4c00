"""Diagnostics of reordered models: junction errors (repeats, drops) and per-slot accuracy."""
import pytest
import torch
from fairseq import tasks

from _reorder_utils import build, parse_train_args
from scripts.lab.analysis.order_errors import count_errors
from scripts.lab.analysis.slot_accuracy import later_slots_hidden, slot_accuracy
from fairseq_plugins.orders import get_order


def test_repeats_are_counted_beyond_the_references_own_and_binned_by_position():
    ref = ["a", "b", "c", "c", "d", "e", "f", "g", "h", "i"]
    hyp = ["a", "b", "c", "c", "d", "e", "e", "f", "g", "h"]  # "c c" is the reference's; "e e" is not; "i" dropped
    counts = count_errors([hyp], [ref], bins=5)
    assert counts.repeats == 1
    assert counts.repeat_position == [0, 0, 0, 1, 0]  # index 6 of 10: the junction of a bidirectional order
    assert counts.missing == 1 and counts.extra == 1  # "i" missing, the second "e" extra
    summary = counts.summary()
    assert summary["repeats_per_100"] == pytest.approx(10.0)
    assert summary["length_ratio"] == pytest.approx(1.0)


def test_drops_are_reference_words_skipped_in_order_and_binned_where_the_reference_has_them():
    ref = list("abcdefghij")
    junction = list("abcdghij")  # e, f dropped where two halves of a bidirectional order would meet
    counts = count_errors([junction], [ref], bins=5)
    assert counts.drops == 2 and counts.drop_position == [0, 0, 2, 0, 0]  # ref indices 4 and 5 of 10
    substituted = list("abcdXYghij")  # a word said differently is no drop, though missing and extra
    counts = count_errors([substituted], [ref], bins=5)
    assert counts.drops == 0 and counts.missing == 2 and counts.extra == 2
    shorter = list("abcdXghij")  # two words replaced by one: one drop, the replaced span's last word
    counts = count_errors([shorter], [ref], bins=5)
    assert counts.drops == 1 and counts.drop_position == [0, 0, 1, 0, 0]
    summary = count_errors([junction, ref], [ref, ref]).summary()
    assert summary["drops_per_100"] == pytest.approx(10.0) and summary["ref_tokens"] == 20


def test_a_moved_word_is_neither_missing_nor_extra_and_lengths_must_match():
    counts = count_errors([[1, 3, 2]], [[1, 2, 3]])
    assert (counts.repeats, counts.missing, counts.extra) == (0, 0, 0)
    with pytest.raises(ValueError, match="one per sentence"):
        count_errors([[1]], [[1], [2]])


class _Oracle(torch.nn.Module):
    """Knows every valid sentence's reordered target; answers it at slot 0 of each step and a wrong
    token at the other slots, so the per-slot rates are known exactly."""

    def __init__(self, task, order):
        super().__init__()
        self.generation_order = order
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.vocab = len(task.target_dictionary)
        self.wrong = task.target_dictionary.unk()
        data = task.dataset("valid")
        self.targets, self.sources = {}, []  # sources in id order
        for i in range(len(data)):
            item = data.dataset[i] if hasattr(data, "dataset") else data[i]
            src = tuple(item["source"].tolist())
            self.sources.append(src)
            self.targets[src] = order.reorder(item["target"][:-1], eos=task.target_dictionary.eos())[0]

    def answer(self, src):
        """The predicted reordered target of the sentence whose source tokens are ``src``."""
        target = self.targets[src]
        keep = torch.arange(len(target)) % self.generation_order.z == 0
        return torch.where(keep, target, torch.tensor(self.wrong))

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        pad = 1
        out = torch.full(prev_output_tokens.shape, self.wrong, dtype=torch.long)
        for b, row in enumerate(src_tokens):
            answer = self.answer(tuple(row[row.ne(pad)].tolist()))
            out[b, : len(answer)] = answer
        return torch.nn.functional.one_hot(out, self.vocab).float(), None


def test_slot_accuracy_separates_the_slots_of_a_step(tiny_corpus):
    args = parse_train_args(tiny_corpus / "bin", ["--arch", "reordered_transformer_tiny", "--target-order",
                                                  "head_tail", "-s", "en", "-t", "de"])
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    order = get_order("head_tail")
    result = slot_accuracy(task, _Oracle(task, order), "valid")
    assert result["z"] == 2
    assert result["by_slot"] == {0: 1.0, 1: 0.0}
    assert result["by_direction"] == {0: 1.0, 1: 0.0}  # head-tail: slot 0 is the left-to-right one
    assert result["first_step"] == pytest.approx(0.5)
    assert 0.45 < result["accuracy"] < 0.55


@pytest.mark.parametrize("order,h", [("interleave", 2), ("l2r", 1)])
def test_hiding_later_slots_cuts_the_first_words_off_the_word_before_them_and_nothing_else(tmp_path, order, h):
    _, model, _ = build(tmp_path, order, h if order != "l2r" else None, c=2)
    z = 2 * h  # step 1 holds slots z..2z-1; its first words are slots z..z+h-1, its later ones z+h..2z-1
    src = torch.randint(4, 40, (2, 5))
    prev = torch.randint(4, 40, (2, 3 * z))
    changed = prev.clone()
    changed[:, z + h:2 * z] = torch.randint(4, 40, (2, z - h))  # the inputs of step 1's later slots

    def logits(tokens):
        return model(src, torch.tensor([5, 5]), tokens)[0]

    with torch.no_grad():
        full_before, full_after = logits(prev), logits(changed)
        with later_slots_hidden(model):
            hidden_before, hidden_after = logits(prev), logits(changed)
    first, later, next_first = slice(z, z + h), slice(z + h, 2 * z), slice(2 * z, 2 * z + h)
    assert not torch.allclose(full_before[:, first], full_after[:, first])  # M(h,c) lets them see those inputs
    assert torch.allclose(hidden_before[:, first], hidden_after[:, first], atol=1e-6)  # hidden: they do not
    assert not torch.allclose(hidden_before[:, later], hidden_after[:, later])  # the later slots see their inputs
    assert not torch.allclose(hidden_before[:, next_first], hidden_after[:, next_first])  # a later step sees step 1
    assert "buffered_future_mask" not in vars(model.decoder)  # the model's own mask is back
    with torch.no_grad():
        assert torch.equal(logits(prev), full_before)


def test_slot_accuracy_hides_later_slots_while_it_reads_and_needs_two_words_a_direction(tiny_corpus, tmp_path):
    args = parse_train_args(tiny_corpus / "bin", ["--arch", "reordered_transformer_tiny", "--target-order",
                                                  "interleave", "--tokens-per-direction", "2", "-s", "en", "-t", "de"])
    task = tasks.setup_task(args)
    model = task.build_model(args).eval()
    seen, forward = [], model.forward

    def spy(*a, **k):
        seen.append("buffered_future_mask" in vars(model.decoder))
        return forward(*a, **k)

    model.forward = spy
    slot_accuracy(task, model, "valid", hide_later_slots=True)
    assert seen and all(seen) and "buffered_future_mask" not in vars(model.decoder)
    seen.clear()
    slot_accuracy(task, model, "valid")
    assert seen and not any(seen)
    _, plain, _ = build(tmp_path, "interleave", 2, c=1)  # IBDecoder: every slot is its direction's first word
    with pytest.raises(ValueError, match="tokens-per-direction 2"):
        slot_accuracy(task, plain, "valid", hide_later_slots=True)


class _RightOnFirst(_Oracle):
    """Answers every slot right on the valid sentences with id < ``first`` and every slot wrong on the others."""

    def __init__(self, task, order, first):
        super().__init__(task, order)
        self.right = set(self.sources[:first])

    def answer(self, src):
        target = self.targets[src]
        return target if src in self.right else torch.full_like(target, self.wrong)


def test_slot_accuracy_reads_only_the_first_sentences_by_id(tiny_corpus):
    args = parse_train_args(tiny_corpus / "bin", ["--arch", "reordered_transformer_tiny", "--target-order",
                                                  "interleave", "-s", "en", "-t", "de"])
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    oracle = _RightOnFirst(task, get_order("interleave"), first=7)
    assert len(task.dataset("valid")) > 7
    assert slot_accuracy(task, oracle, "valid", sentences=7)["accuracy"] == pytest.approx(1.0)
    assert slot_accuracy(task, oracle, "valid", max_tokens=64, sentences=7)["accuracy"] == pytest.approx(1.0)
    assert slot_accuracy(task, oracle, "valid")["accuracy"] < 0.9  # the whole split has the wrong ones too
    with pytest.raises(ValueError, match="at least 1"):
        slot_accuracy(task, oracle, "valid", sentences=0)


def test_the_command_reads_fairseq_generate_output(tmp_path, capsys):
    from scripts.order_errors import main

    out = tmp_path / "ib.txt"
    out.write_text("S-0\tx y\nT-0\ta b c\nH-0\t-0.5\ta b b c\nD-0\t-0.5\ta b b c\nH-0\t-0.9\ta c\n"
                   "S-1\tz\nT-1\td e\nH-1\t-0.2\td\n", encoding="utf-8")
    main([str(out), "--bins", "2"])
    table = capsys.readouterr().out
    row = [line for line in table.splitlines() if line.startswith("| ib")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:7] == ["2", "1.000", "20.00", "20.00", "20.00", "20.00"]  # 1 repeat, 1 drop = missing (e), 1 extra (b) of 5
    assert cells[7:9] == ["0 1", "0 1"]  # the repeat in the second half of "a b b c", the drop at the end of "d e"
    bad = tmp_path / "quiet.txt"
    bad.write_text("Generate test with beam=4: BLEU4 = 1.0\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="do not pass --quiet"):
        main([str(bad)])


def test_corpus_edits_counts_what_copying_the_source_would_get_wrong():
    from scripts.corpus_edits import summary

    sources = ["the cat sat down", "a dog barks", "hello there"]
    references = ["the cat sat down", "a dog barked", "hello there"]
    s = summary(sources, references)
    assert s["unchanged"] == pytest.approx(2 / 3, abs=1e-3)
    assert s["edit_ratio_mean"] == pytest.approx((0 + 1 / 3 + 0) / 3, abs=1e-3)  # one word of three, in one sentence
    assert s["edit_ratio_median"] == 0 and s["words_per_source"] == pytest.approx(3.0)
    assert 0 < s["copy_bleu"] < 100 and s["copy_ter"] == pytest.approx(100 / 9, abs=0.01)  # 1 edit, 9 reference words
    assert summary(references, references)["copy_bleu"] == 100
    with pytest.raises(SystemExit, match="two sides"):
        summary(sources, references[:2])


def test_the_slot_accuracy_command_reads_each_checkpoints_own_order(tiny_corpus, tiny_model, capsys):
    from scripts.slot_accuracy import main

    main([str(tiny_model), "--data", str(tiny_corpus)])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if str(tiny_model) in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "300" and cells[2] == "l2r"  # the tiny model's 300 updates, a plain L2R model
    assert 0.0 < float(cells[3]) < 1.0 and cells[4] == cells[3]  # one direction: its accuracy is the whole
    with pytest.raises(SystemExit, match="not a checkpoint file"):
        main([str(tiny_model.parent / "nope.pt"), "--data", str(tiny_corpus)])
