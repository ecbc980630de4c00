"""A keyboard typo: one character of a word swapped with the next, dropped, doubled or replaced by a
keyboard neighbour (the typo-en corpus's errors, and the GEC-like corpus's misspellings)."""

_KEYBOARD = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
_NEIGHBOURS = {}
for _r, _row in enumerate(_KEYBOARD):
    for _c, _ch in enumerate(_row):
        near = [_row[i] for i in (_c - 1, _c + 1) if 0 <= i < len(_row)]
        for _dr in (-1, 1):
            if 0 <= _r + _dr < len(_KEYBOARD) and _c < len(_KEYBOARD[_r + _dr]):
                near.append(_KEYBOARD[_r + _dr][_c])
        _NEIGHBOURS[_ch] = near


def typo(word, rng):
    """One character edit of a word (words shorter than 2 letters only get a replacement)."""
    letters = [i for i, ch in enumerate(word) if ch.isalpha()]
    if not letters:
        return word
    i = rng.choice(letters)
    kind = rng.choice(("swap", "delete", "double", "neighbour")) if len(word) > 1 else "neighbour"
    if kind == "swap" and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "delete":
        return word[:i] + word[i + 1 :]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    lower = word[i].lower()
    if lower in _NEIGHBOURS:
        new = rng.choice(_NEIGHBOURS[lower])
        return word[:i] + (new.upper() if word[i].isupper() else new) + word[i + 1 :]
    return word
