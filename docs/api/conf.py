"""Sphinx configuration of rankopt's API reference, generated from the docstrings.

Build it with ``sphinx-build -W --keep-going -b html docs/api build/api-html`` (warnings are errors;
``tests/test_api_reference.py`` runs the same build in CI and checks every public name is in it).
"""

project = "rankopt"
author = "the rankopt developers"
extensions = ["sphinx.ext.autodoc", "numpydoc"]

# The reference is of the installed package; its optional dependencies (torch) are imported where present.
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures show them; numpydoc's sections describe them
numpydoc_show_class_members = False  # autodoc's :members: lists them, once
numpydoc_validation_checks: set[str] = set()
html_theme = "alabaster"
html_static_path: list[str] = []
exclude_patterns: list[str] = []
nitpicky = False


import re  # noqa: E402

#: Docstrings write set sizes as |P| and |N|, which reStructuredText reads as substitutions: outside
#: ``literals`` the bars are escaped, so they render as written.
_LITERAL = re.compile(r"(``.*?``)")


def _escape_bars(app, what, name, obj, options, lines):
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("+-", "+=", "| ")):  # a table or a line block: leave it
            continue
        parts = _LITERAL.split(line)
        lines[index] = "".join(p if p.startswith("``") else p.replace("|", r"\|") for p in parts)


def _skip_inherited_request_methods(app, what, name, obj, skip, options):
    """scikit-learn's metadata-routing setters (set_fit_request, …) are scikit-learn's to document."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _escape_bars, priority=100)
    app.connect("autodoc-skip-member", _skip_inherited_request_methods)
