#!/usr/bin/env python3
"""The documentation names only what is in the repository: every repo path
that README.md and docs/*.md name exists (a glob matches something), every
relative link points at a file of the repo, and every function or struct the
concept map (docs/concepts.md) names after a file occurs in that file.

Needs nothing built; run from anywhere.
"""
import glob
import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOP = ("common", "docs", "emulator", "firmware", "host", "shared", "tests", "toolchain", ".ci")
# A path starts at one of the top-level folders, not inside another word or path.
PATH = re.compile(r"(?<![\w./$-])((?:%s)/[\w.*+/-]*)" % "|".join(re.escape(t) for t in TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def exists(path):
    path = path.rstrip(".,:;")
    if "*" in path:
        return bool(glob.glob(os.path.join(ROOT, path)))
    return os.path.exists(os.path.join(ROOT, path))


def concept_rows(text):
    """(line number, [(path, [names])]) for each row of the concept tables."""
    for n, line in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[1] in ("code", "---"):
            continue
        pairs = []
        for part in cells[1].split(";"):
            ticks = re.findall(r"`([^`]+)`", part)
            if ticks:
                pairs.append((ticks[0], [t for t in ticks[1:]]))
        yield n, pairs


class Docs(unittest.TestCase):
    def test_every_repo_path_named_exists(self):
        for doc in documents():
            with open(doc) as f:
                text = f.read()
            for m in PATH.finditer(text):
                with self.subTest(doc=os.path.relpath(doc, ROOT), path=m.group(1)):
                    self.assertTrue(exists(m.group(1)), f"{os.path.relpath(doc, ROOT)} names {m.group(1)}")

    def test_links_point_at_files_of_the_repo(self):
        for doc in documents():
            with open(doc) as f:
                links = LINK.findall(f.read())
            for target in links:
                with self.subTest(doc=os.path.relpath(doc, ROOT), link=target):
                    self.assertNotRegex(target, r"^[a-z]+:", "the docs link only to files in the repo")
                    path = os.path.normpath(os.path.join(os.path.dirname(doc), target.split("#")[0]))
                    self.assertTrue(path.startswith(ROOT + os.sep) and os.path.exists(path), target)

    def test_the_readme_links_every_doc(self):
        with open(os.path.join(ROOT, "README.md")) as f:
            links = set(LINK.findall(f.read()))
        for doc in documents()[1:]:
            self.assertIn(os.path.relpath(doc, ROOT), links)

    def test_the_concept_map_names_what_is_in_each_file(self):
        with open(os.path.join(ROOT, "docs", "concepts.md")) as f:
            text = f.read()
        rows = list(concept_rows(text))
        self.assertGreater(len(rows), 40)
        for n, pairs in rows:
            self.assertTrue(pairs, f"docs/concepts.md:{n}: a row without code")
            for path, names in pairs:
                with self.subTest(line=n, path=path):
                    self.assertTrue(os.path.isfile(os.path.join(ROOT, path)), f"docs/concepts.md:{n}: {path}")
                    with open(os.path.join(ROOT, path)) as f:
                        source = f.read()
                    for name in names:
                        self.assertTrue(name.rstrip("()") in source, f"docs/concepts.md:{n}: {name} not in {path}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
