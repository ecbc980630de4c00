"""A copy of the plugin with one module added as a contributor adds it (its file plus one edited
import line), and the Python template a docs/ARCHITECTURE.md section shows: what the template tests share."""
import re
import shutil

from conftest import PLUGIN_DIR, REPO


def architecture_template(heading):
    """The first ```python block after ``heading`` in docs/ARCHITECTURE.md."""
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    return re.search(r"```python\n(.*?)```", doc[doc.index(heading):], re.S).group(1)


def plugin_with_module(root, package, filename, code, import_prefix, old, new):
    """``root/fairseq_plugins`` with ``code`` as ``package/filename`` and, in ``package/__init__.py``,
    the line starting with ``import_prefix`` edited from ``old`` to ``new``."""
    plugin = root / "fairseq_plugins"
    shutil.copytree(PLUGIN_DIR, plugin, ignore=shutil.ignore_patterns("__pycache__"))
    folder = plugin / package
    (folder / filename).write_text(code)
    init = folder / "__init__.py"
    line = next(x for x in init.read_text().splitlines() if x.startswith(import_prefix))
    init.write_text(init.read_text().replace(line, line.replace(old, new)))
    return plugin
