"""A griffe extension for the documentation site (mkdocs.yml): the docstrings' Sphinx roles.

The package's docstrings name other objects the Sphinx way, ``:func:`drain``` or
``:class:`~django_pqjobs.DuplicateJob```, which Markdown would show as they are written.
This turns each into a cross-reference of mkdocs-autorefs: resolved from the object's
scope (a bare ``drain`` in ``django_pqjobs.testing`` is ``django_pqjobs.testing.drain``),
a link when the site documents the target, plain code when it does not (an internal
helper). ``~`` shows the last part of the name only, as in Sphinx. A paragraph that ends in
``::`` before an indented literal block ends in ``:``.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`<>]+)`")
LITERAL = re.compile(r"(\s)?::(?=\n[ \t]*\n)")


def full_path(obj: griffe.Object, target: str) -> str:
    """The dotted path ``target`` names from ``obj``'s scope, or ``target`` unresolved."""
    if target.startswith("."):  # relative to obj's package, as in a relative import
        module = obj if isinstance(obj, griffe.Module) else obj.module
        package = module if module.is_init_module or module.parent is None else module.parent
        base = package.path.split(".")
        ups = len(target) - len(target.lstrip("."))
        return ".".join([*base[: len(base) - ups + 1], target.lstrip(".")])
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            resolved = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{resolved}.{rest}" if rest else resolved
    return target


class RstRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None or ":" not in obj.docstring.value:
            return

        def reference(match: re.Match[str]) -> str:
            short, target = match.group(1), match.group(2).strip()
            shown = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
            identifier = html.escape(full_path(obj, target), quote=True)
            return (
                f'<autoref identifier="{identifier}" optional>'
                f"<code>{html.escape(shown)}</code></autoref>"
            )

        value = ROLE.sub(reference, obj.docstring.value)
        # "as follows::" before an indented literal block reads "as follows:" (Sphinx's rule).
        obj.docstring.value = LITERAL.sub(lambda match: "" if match[1] else ":", value)
