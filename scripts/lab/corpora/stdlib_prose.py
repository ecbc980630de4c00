"""English prose every Python machine has offline: the standard library's docstrings, comment blocks and
``pydoc_data`` topics, split into sentences of prose (code-like, indented, bulleted or doctest lines left
out); the text of the GEC-like corpus (``python -m scripts.build_gec_corpus``)."""
import ast
import io
import re
import sysconfig
import tokenize
from pathlib import Path

# stdlib folders that hold no prose of their own (vendored or generated code)
_SKIP_PARTS = {"site-packages", "__pycache__", "lib2to3", "turtledemo", "idlelib", "ensurepip"}
# a sentence that reads as code, markup or a doctest is not prose
_NOT_PROSE = re.compile(r"[{}\\<>|=]|::|`|\(\)\.|\w\.\w+\(|\s[-+*/%]\s|_\w|\w_|\*\*|'''|\"\"\"")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def stdlib_texts(root=None):
    """Docstrings, comment blocks and pydoc topics of the standard library, in a fixed order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not _SKIP_PARTS & set(p.relative_to(root).parts))
    texts = []
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few test files are deliberately broken
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    texts.append(doc)
        texts.extend(_comment_blocks(source))
    try:
        from pydoc_data.topics import topics
        texts.extend(topics[k] for k in sorted(topics))
    except ImportError:  # a Python built without its docs data still has docstrings and comments
        pass
    return texts



def _comment_blocks(source):
    block = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                block.append(tok.string.lstrip("#").strip())
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) and block:
                yield "\n".join(block)
                block = []
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return
    if block:
        yield "\n".join(block)



def prose_sentences(texts, min_words, max_words):
    """Sorted unique sentences of prose paragraphs (indented, bulleted or doctest lines are not)."""
    out = set()
    for text in texts:
        for paragraph in re.split(r"\n\s*\n", text):
            lines = paragraph.split("\n")
            if any(line.startswith(("   ", ">>>", "-", "*", "|", "+", "=")) for line in lines):
                continue
            joined = " ".join(line.strip() for line in lines)
            for sentence in _SENTENCE_END.split(joined):
                words = sentence.split()
                if (min_words <= len(words) <= max_words and sentence[0].isupper() and sentence.endswith(".")
                        and sentence.isascii() and not _NOT_PROSE.search(sentence)):
                    out.add(" ".join(words))
    return sorted(out)
