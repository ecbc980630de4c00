"""A reference run's model list (``--models``): one model a line, ``NAME CONFIG CORPUS [KEY=VALUE ...]
[extra fairseq-train args]`` in shell words, and the fairseq-train words of a model's config file."""
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _positive(kind):
    def parse(text):
        value = kind(text)
        if not value > 0:
            raise ValueError(f"{text} is not positive")
        return value
    return parse


def _generate_args(text):
    shlex.split(text)  # a malformed quote is an error here, not in the scorer hours later
    return text


def _yes_no(text):
    if text not in ("yes", "no"):
        raise ValueError(f"{text} is neither yes nor no")
    return text == "yes"


def _folder(text):
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ValueError(f"{text!r} is not a folder name of {{CKPT}}")
    return text


LIST_KEYS = {"updates": _positive(float), "beam": _positive(int), "generate": _generate_args, "curve": _yes_no,
             "baseline": _folder}


def read_models(path, names=None):
    """The models of the list at ``path`` (only ``names`` if given), as dicts: name, config, corpus,
    extra (fairseq-train words), update_scale, beam (None: ``--curve-beam``), generate and curve."""
    models = []
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        where = f"{path}:{number} ({raw.strip()!r})"
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as err:
            raise SystemExit(f"error: {where}: {err}; list lines are shell words, quote generate=\"...\" once")
        if not words:
            continue
        if len(words) < 3:
            raise SystemExit(f"error: {where}: a model line is NAME CONFIG CORPUS [KEY=VALUE ...] [fairseq-train args]")
        name, config, corpus, *rest = words
        model = {"name": name, "config": config, "corpus": corpus, "extra": [], "update_scale": 1.0, "beam": None,
                 "generate": "", "curve": True, "baseline": "baseline"}
        for word in rest:
            key, eq, value = word.partition("=")
            if not (eq and re.fullmatch(r"[a-z_]+", key)):
                model["extra"].append(word)
                continue
            if key not in LIST_KEYS:
                raise SystemExit(f"error: {where}: unknown key '{key}=' (known: {', '.join(f'{k}=' for k in LIST_KEYS)}); "
                                 "fairseq-train arguments start with --")
            try:
                model["update_scale" if key == "updates" else key] = LIST_KEYS[key](value)
            except ValueError as err:
                raise SystemExit(f"error: {where}: bad {key}= value: {err}")
        if any(m["name"] == name for m in models):
            raise SystemExit(f"error: {where}: the name {name} is used twice; give every model its own name")
        models.append(model)
    if names:
        known = {m["name"] for m in models}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"error: {', '.join(unknown)} not in {path} (known: {', '.join(sorted(known))})")
        models = [m for m in models if m["name"] in names]
    return models


def config_args(config, ckpt_root, data_root, baseline="baseline"):
    """A config file's fairseq-train words; ``{CKPT}/baseline/`` in it reads ``{CKPT}/<baseline>/`` (a
    list line's ``baseline=verifier``: the frozen verifier of the convergence run)."""
    text = " ".join(line.split("#", 1)[0] for line in (REPO / config).read_text().splitlines())
    text = text.replace("{CKPT}/baseline/", f"{{CKPT}}/{baseline}/")
    text = text.replace("{CKPT}", str(ckpt_root)).replace("{DATA}", str(data_root))
    return shlex.split(text)


def max_update_of(model, args):
    return max(1, round(args.max_update * model.get("update_scale", 1.0)))
