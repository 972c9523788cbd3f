"""What `mkdocs build --strict` does not check of the documentation site (scripts/check_docs.sh).

    python scripts/check_docs_site.py SITE_DIR   (SITE_DIR: the site `mkdocs build` made)

- The README's links (README.md is not a page of the site): each file it links to exists, and
  each anchor into docs/ is a heading the built page has.
- The generated API reference (docs/reference/python-api.md) is whole: every name
  `django_pqjobs.__all__` exports has a section, and every member a `::: object` block lists
  exists (mkdocstrings drops a listed member it cannot find without a word, so a renamed
  function would leave the page in silence).

Run with the `docs` extra installed (griffe reads the package without importing it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import griffe

ROOT = Path(__file__).resolve().parent.parent
API_PAGE = "reference/python-api"


def built_page(site: Path, page: str) -> str:
    path = site / ("index.html" if page == "index" else f"{page}/index.html")
    return path.read_text(encoding="utf-8")


def readme_problems(site: Path) -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        if path and not (ROOT / path).exists():
            problems.append(f"README.md links to {target}: there is no {path}")
        elif anchor and not (path.startswith("docs/") and path.endswith(".md")):
            problems.append(f"README.md links to {target}: only anchors into docs/ are checked")
        elif anchor:
            page = path.removeprefix("docs/").removesuffix(".md")
            if f'id="{unquote(anchor)}"' not in built_page(site, page):
                problems.append(f"README.md links to {target}: {path} has no heading #{anchor}")
    return problems


def api_reference_problems(site: Path) -> list[str]:
    html = built_page(site, API_PAGE)
    ids = set(re.findall(r'id="(django_pqjobs[\w.]*)"', html))
    problems = []
    package = griffe.load("django_pqjobs", search_paths=[ROOT], allow_inspection=False)
    for name in package.exports or ():
        member = package.members[name]
        paths = {member.path, member.target_path if member.is_alias else member.path}
        if not paths & ids:
            problems.append(f"docs/{API_PAGE}.md has no section for django_pqjobs.{name}")
    source = (ROOT / "docs" / f"{API_PAGE}.md").read_text(encoding="utf-8")
    for block in re.split(r"^(?=::: )", source, flags=re.M):
        head = re.match(r"::: ([\w.]+)\n", block)
        listed = re.search(r"^ +members:\n((?: +- \w+\n)+)", block, flags=re.M)
        if head and listed:
            for member in re.findall(r"- (\w+)", listed.group(1)):
                if f"{head.group(1)}.{member}" not in ids:
                    problems.append(
                        f"docs/{API_PAGE}.md lists {member} under {head.group(1)}, "
                        "which has no such member (renamed? removed?)"
                    )
    return problems


def main() -> None:
    site = Path(sys.argv[1])
    problems = readme_problems(site) + api_reference_problems(site)
    if problems:
        sys.exit("\n".join(dict.fromkeys(problems)))
    print("every link of README.md leads somewhere; the API reference lists every export")


if __name__ == "__main__":
    main()
